-- Claim a step for this worker under a lease, unless it must not run now.
-- KEYS[1] run key; ARGV: step id, lease_ms, the message's attempt number
-- (a newer attempt than the one holding the lease is that attempt's retry, not a duplicate),
-- the worker claiming it (host:pid/thread; kept as the step's worker, '' records none),
-- then, for a message's claim, the message's actor and its step's ancestors (frames json) as it carries them
-- The attempt is added to the step's history (h).
-- Returns {'run', attempt} | {'done'} | {'stopped', run_status} | {'busy', wait_ms} | {'missing'}
--       | {'malformed', why}: the message's actor or address is not the stored plan's, or its run has not
--         released its step yet (nothing changes)
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if not status then return {'missing'} end
local raw = redis.call('HGET', run .. ':steps', ARGV[1])
if not raw then return {'missing'} end
local step = cjson.decode(raw)
if ARGV[5] and ARGV[5] ~= step.a then return {'malformed', 'it is a step of ' .. tostring(step.a) .. ', not of ' .. ARGV[5]} end
if ARGV[6] and step.u and ARGV[6] ~= step.u then return {'malformed', 'its ancestors are not the plan\'s ' .. step.u} end
-- A step runs only once its run released it: one of the run's first steps, or an entry of the chain
-- continuation (r) the step before it released (complete.lua keeps what that receives in :inputs). One that
-- never succeeded is refused until then: a message for it is not one its run sent.
if step.r and step.s ~= 'succeeded' and redis.call('HEXISTS', run .. ':inputs', step.r) == 0 then
  return {'malformed', 'it is not due: its run has not released ' .. step.r .. ' yet'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(redis.call('HGET', run, 'deadline_at') or '0')
if deadline > 0 and now > deadline and (status == 'pending' or status == 'running') then
  status = 'failed'
  redis.call('HSET', run, 'status', status, 'error', 'deadline exceeded', 'failed_step', ARGV[1], 'finished_at', now)
  redis.call('PUBLISH', run, status)
end
if status ~= 'pending' and status ~= 'running' then
  if step.s == 'pending' or step.s == 'retrying' then
    step.s = 'skipped'
    redis.call('HSET', run .. ':steps', ARGV[1], cjson.encode(step))
  end
  return {'stopped', status}
end
if step.s == 'succeeded' then return {'done'} end
if step.s == 'running' and step.l and step.l > now and (step.n or 0) >= tonumber(ARGV[3]) then
  return {'busy', step.l - now}
end
step.s = 'running'
step.n = (step.n or 0) + 1
step.t0 = step.t0 or now
step.l = now + tonumber(ARGV[2])
step.loc = nil  -- claimed from a delivery: RabbitMQ redelivers it if this worker dies
if ARGV[4] and ARGV[4] ~= '' then step.w = ARGV[4] end
-- The step's history (step_history.py): this attempt, the latest 20 attempts and replays kept
step.h = step.h or {}
table.insert(step.h, {n = step.n, a = now, w = ARGV[4] ~= '' and ARGV[4] or nil})
if #step.h > 20 then table.remove(step.h, 1) end
redis.call('HSET', run .. ':steps', ARGV[1], cjson.encode(step))
if status == 'pending' then
  redis.call('HSET', run, 'status', 'running', 'started_at', now, 'touched', now)
else
  redis.call('HSET', run, 'touched', now)
end
redis.call('PUBLISH', run, 'step')
return {'run', step.n}
