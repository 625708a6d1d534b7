-- Renew the lease of a step this worker runs, while the claim it runs under still holds the step.
-- KEYS[1] run key; ARGV: step id, the claim (the step's claim count when it was claimed), lease_ms
-- Returns 1 (renewed) | 0 (lost: claimed again since, by a worker that found the lease lapsed)
--       | 2 (ended: the step is no longer running, or its run is gone)
local raw = redis.call('HGET', KEYS[1] .. ':steps', ARGV[1])
if not raw then return 2 end
local step = cjson.decode(raw)
if (step.n or 0) ~= tonumber(ARGV[2]) then return 0 end
if step.s ~= 'running' then return 2 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
step.l = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1] .. ':steps', ARGV[1], cjson.encode(step))
return 1
