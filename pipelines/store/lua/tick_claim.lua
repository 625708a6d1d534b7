-- Claim one tick of a scheduled job: only the first claim runs it (two schedulers send it twice).
-- KEYS[1] tick key, KEYS[2] the job's schedule key, KEYS[3] the job's sweep mark;
-- ARGV: tick (epoch ms), retention_ms
-- Returns 1 for the first claim of the tick, else 0. The job's first claim starts its sweeps for
-- missed ticks there (tick_sweep.lua).
local claims = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
if claims > 1 then return 0 end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) > last then redis.call('SET', KEYS[2], ARGV[1]) end
redis.call('SET', KEYS[3], ARGV[1], 'NX')
return 1
