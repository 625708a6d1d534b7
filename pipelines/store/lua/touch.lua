-- Keep a running run alive: a step of it runs in the caller's process (see stall.lua).
-- KEYS[1] run key; ARGV: none
-- Returns 1 when the run is still going (touched), 0 when it ended or is past retention
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status ~= 'pending' and status ~= 'running' then return 0 end
local t = redis.call('TIME')
redis.call('HSET', run, 'touched', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return 1
