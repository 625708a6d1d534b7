-- Reserve the next `count` slots of a rate limit (the generic cell rate algorithm, burst 1).
-- KEYS[1] the limit's key; ARGV: count, interval_ms
-- Returns, per slot, the milliseconds until it
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local delays = {}
for i = 1, tonumber(ARGV[1]) do
  delays[i] = tat - now
  tat = tat + interval
end
redis.call('SET', KEYS[1], tat, 'PX', tat - now + interval)
return delays
