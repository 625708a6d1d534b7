-- A watchdog's look at a lease: take it over if it expired (the job's worker died).
-- KEYS[1] lease key
-- Returns {'gone'} | {'alive', ms left} | {'expired', record}
-- A lease taken over keeps its key, held by the watchdog, so that a copy of the job's message is not
-- run and its former holder's heartbeat learns it was taken over
local lease = redis.call('HMGET', KEYS[1], 'until', 'record')
if not lease[1] then return {'gone'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local left = tonumber(lease[1]) - now
if left > 0 then return {'alive', left} end
redis.call('HDEL', KEYS[1], 'until', 'record')
redis.call('HSET', KEYS[1], 'holder', 'watchdog')
return {'expired', lease[2]}
