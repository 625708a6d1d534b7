-- Fail a run that passed its deadline, naming the step that was running (the deadline's own check,
-- when it passes; claims, completions and progress reports check it too).
-- KEYS[1] run key; ARGV: retention_ms
-- Returns {'failed', running step ('' when none ran)} | {'wait', ms left} | {'none'} (no deadline, or
-- the run ended or is unknown)
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status ~= 'pending' and status ~= 'running' then return {'none'} end
local deadline = tonumber(redis.call('HGET', run, 'deadline_at') or '0')
if deadline <= 0 then return {'none'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now <= deadline then return {'wait', deadline - now} end
local steps = redis.call('HGETALL', run .. ':steps')
local running = {}
for i = 1, #steps, 2 do
  local step = cjson.decode(steps[i + 1])
  if step.s == 'running' then
    table.insert(running, steps[i])
    step.s = 'failed'
    step.e = 'deadline exceeded'
    step.t1 = now
    step.l = nil
    local attempt = step.h and step.h[#step.h]
    if attempt and attempt.n == step.n and not attempt.o then
      attempt.b, attempt.o, attempt.e = now, 'failed', step.e
    end
    redis.call('HSET', run .. ':steps', steps[i], cjson.encode(step))
  end
end
table.sort(running)
local named = running[1] or ''
redis.call('HSET', run, 'status', 'failed', 'error', 'deadline exceeded', 'finished_at', now)
if named ~= '' then redis.call('HSET', run, 'failed_step', named) end
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs',
    run .. ':logs'}) do
  redis.call('PEXPIRE', key, tonumber(ARGV[1]))
end
redis.call('PUBLISH', run, 'failed')
return {'failed', named}
