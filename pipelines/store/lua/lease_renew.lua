-- Renew leases held by this worker (heartbeat). KEYS: lease keys; ARGV: lease_ms, then one holder per key
-- Returns the indexes (1-based) of the leases another holder took over (a watchdog); a lease that ended
-- meanwhile (closed by its job) or is unknown is neither renewed nor reported
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local taken = {}
for i, key in ipairs(KEYS) do
  local holder = redis.call('HGET', key, 'holder')
  if holder == ARGV[i + 1] then
    redis.call('HSET', key, 'until', now + tonumber(ARGV[1]))
  elseif holder then
    table.insert(taken, i)
  end
end
return taken
