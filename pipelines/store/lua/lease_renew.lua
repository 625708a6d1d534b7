-- Renew leases held by this worker (heartbeat). KEYS: lease keys; ARGV: lease_ms, then one holder per key
-- Returns the indexes (1-based) of the leases this worker no longer holds
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost = {}
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'holder') == ARGV[i + 1] then
    redis.call('HSET', key, 'until', now + tonumber(ARGV[1]))
  else
    table.insert(lost, i)
  end
end
return lost
