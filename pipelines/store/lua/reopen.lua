-- Reopen a dead-lettered step for replay: the step may run again, and a run that failed runs again.
-- KEYS[1] run key; ARGV: step id, retention_ms, why it is replayed (kept in the step's history, h)
-- Returns {'reopened'} | {'done'} (the step had succeeded) | {'stopped', run_status} | {'missing'}
--       | {'not due', continuation}: the run has not released the step (the continuation it starts in) yet
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if not status then return {'missing'} end
local raw = redis.call('HGET', run .. ':steps', ARGV[1])
if not raw then return {'missing'} end
local step = cjson.decode(raw)
if step.s == 'succeeded' then return {'done'} end
-- Nor is a step reopened before its run released it (see claim.lua): its letter is of a message the run
-- did not send, and reopening the step would let that run.
if step.r and redis.call('HEXISTS', run .. ':inputs', step.r) == 0 then return {'not due', step.r} end
if status == 'failed' then
  redis.call('HSET', run, 'status', 'running')
  redis.call('HDEL', run, 'error', 'failed_step', 'finished_at', 'deadline_at')
elseif status ~= 'pending' and status ~= 'running' then
  return {'stopped', status}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', run, 'touched', now)
step.h = step.h or {}
table.insert(step.h, {r = ARGV[3] or '', a = now})
if #step.h > 20 then table.remove(step.h, 1) end
step.s = 'retrying'
step.e = nil
step.l = nil
step.t1 = nil
redis.call('HSET', run .. ':steps', ARGV[1], cjson.encode(step))
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs',
    run .. ':reruns', run .. ':logs'}) do
  redis.call('PEXPIRE', key, tonumber(ARGV[2]))
end
redis.call('PUBLISH', run, 'reopened')
return {'reopened'}
