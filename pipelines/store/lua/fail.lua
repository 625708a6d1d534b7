-- Record a failed attempt of a step; a final failure fails the run (the first one wins).
-- KEYS[1] run key; ARGV: step id, error text, final ('1' | '0'), retention_ms,
--       the claim the attempt ran under ('' for a failure found before any claim)
-- The attempt ends in the step's history (h) as 'retrying' or 'failed', with its error.
-- Returns {1, created_at} when this failure failed the run, {-1} when the attempt had lost its claim
-- (a later claim holds the step: the step keeps that claim's state, and only the attempt's own history
-- entry ends, as its retry may claim the step before the failure that scheduled it is recorded), else {0}
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if not status then return {0} end
local raw = redis.call('HGET', run .. ':steps', ARGV[1])
if not raw then return {0} end
local step = cjson.decode(raw)
local claim = tonumber(ARGV[5] or '')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local outcome = ARGV[3] == '1' and 'failed' or 'retrying'
if claim and (step.n or 0) ~= claim then
  for _, attempt in ipairs(step.h or {}) do
    if attempt.n == claim and not attempt.o then
      attempt.b, attempt.o, attempt.e = now, outcome, string.sub(ARGV[2], 1, 500)
      redis.call('HSET', run .. ':steps', ARGV[1], cjson.encode(step))
    end
  end
  return {-1}
end
if step.s == 'succeeded' then return {0} end
step.e = ARGV[2]
step.l = nil
redis.call('HSET', run, 'touched', now)
if ARGV[3] == '1' then
  step.s = 'failed'
  step.t1 = now
else
  step.s = 'retrying'
end
local attempt = step.h and step.h[#step.h]
if attempt and attempt.n == step.n and not attempt.o then
  attempt.b, attempt.o, attempt.e = now, step.s, string.sub(ARGV[2], 1, 500)
end
redis.call('HSET', run .. ':steps', ARGV[1], cjson.encode(step))
local failed_run = 0
if ARGV[3] == '1' and (status == 'pending' or status == 'running') then
  failed_run = 1
  redis.call('HSET', run, 'status', 'failed', 'error', ARGV[2], 'failed_step', ARGV[1], 'finished_at', now)
  for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs',
    run .. ':logs'}) do
    redis.call('PEXPIRE', key, tonumber(ARGV[4]))
  end
end
redis.call('PUBLISH', run, step.s)
if failed_run == 1 then return {1, redis.call('HGET', run, 'created_at')} end
return {0}
