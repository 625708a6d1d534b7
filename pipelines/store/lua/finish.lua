-- End a run that has not finished yet: cancel it, or fail it before any step ran.
-- KEYS[1] run key; ARGV: new status ('cancelled' | 'failed'), error text, retention_ms
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status ~= 'pending' and status ~= 'running' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', run, 'status', ARGV[1], 'finished_at', now)
if ARGV[2] ~= '' then redis.call('HSET', run, 'error', ARGV[2]) end
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs',
    run .. ':logs'}) do
  redis.call('PEXPIRE', key, tonumber(ARGV[3]))
end
redis.call('PUBLISH', run, ARGV[1])
return 1
