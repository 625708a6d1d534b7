-- Open the lease of a long-running job, unless one is open already (then its watchdog owns the job) or
-- the job ended (its lease is kept, closed, for the retention period).
-- KEYS[1] lease key; ARGV: holder, lease_ms, the job's record (JSON), retention_ms
-- Returns 'opened', 'open' or 'ended'
if redis.call('HEXISTS', KEYS[1], 'ended') == 1 then return 'ended' end
if redis.call('EXISTS', KEYS[1]) == 1 then return 'open' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'until', now + tonumber(ARGV[2]), 'record', ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
return 'opened'
