-- Look at a running run the stall sweep found untouched: leave it (something still advances it),
-- re-drive the steps nothing will advance any more, or fail it when re-driving did not help.
-- KEYS[1] run key; ARGV: stalled_after_ms, most re-drives without progress, resumed (epoch ms: the
--   stall clock starts again then, after a time nothing swept, such as a store outage), retention_ms
-- A run is touched when it is created (plus its start delay), and by every claim, completion, failure,
-- reopening and keep-alive of its steps; a step's live lease counts as a touch until it lapses.
-- Idle steps: those pending, retrying or running (their lease lapsed) where steps started already (the
-- run's first steps, and each chain continuation handed out: ':inputs' holds what they receive).
-- Returns {'gone'} (ended, or past retention) | {'alive', last touch ms}
--   | {'redrive', re-drive n, next touch ms, pipeline, correlation id, then per group of idle steps:
--      group id, leaves json, input json, idle step ids (space-separated)}
--   | {'failed', step id ('' when none), created_at, pipeline, why}
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status ~= 'pending' and status ~= 'running' then return {'gone'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = tonumber(ARGV[1])
local touched = tonumber(redis.call('HGET', run, 'touched') or redis.call('HGET', run, 'created_at') or '0')
touched = math.max(touched, tonumber(ARGV[3]))
local flat = redis.call('HGETALL', run .. ':steps')
local steps = {}
for i = 1, #flat, 2 do
  local step = cjson.decode(flat[i + 1])
  steps[flat[i]] = step
  if step.s == 'running' and step.l and step.l > touched then touched = step.l end
end
if now < touched + after then return {'alive', touched} end

local groups, idle = {}, {}
local inputs = redis.call('HGETALL', run .. ':inputs')
for i = 1, #inputs, 2 do
  local ids = redis.call('HGET', run .. ':entries', inputs[i])
  local waiting = {}
  for id in string.gmatch(ids or '', '%S+') do
    local step = steps[id]
    if step and (step.s == 'pending' or step.s == 'retrying' or step.s == 'running') then
      table.insert(waiting, id)
      table.insert(idle, id)
    end
  end
  if #waiting > 0 then
    local leaves = redis.call('HGET', run .. ':starts', inputs[i]) or '[]'
    for _, item in ipairs({inputs[i], leaves, inputs[i + 1], table.concat(waiting, ' ')}) do
      table.insert(groups, item)
    end
  end
end

local done = tonumber(redis.call('HGET', run, 'done') or '0')
local redrives = tonumber(redis.call('HGET', run, 'redrives') or '0')
if done > tonumber(redis.call('HGET', run, 'redrive_done') or '0') then redrives = 0 end
local pipeline = redis.call('HGET', run, 'pipeline') or ''
if #groups > 0 and redrives < tonumber(ARGV[2]) then
  redrives = redrives + 1
  -- Each re-drive without progress waits twice as long as the one before for the run to move.
  local next_touch = now + math.floor(after * (2 ^ (redrives - 1) - 1))
  redis.call('HSET', run, 'redrives', redrives, 'redrive_done', done, 'touched', next_touch)
  local reply = {'redrive', redrives, next_touch, pipeline, redis.call('HGET', run, 'correlation_id') or ''}
  for _, item in ipairs(groups) do table.insert(reply, item) end
  return reply
end

table.sort(idle)
local named = idle[1] or ''
local idle_s = math.floor((now - touched) / 1000)
local why = string.format('stalled: nothing advanced it for %d s', idle_s)
if #groups == 0 then
  why = why .. ', and none of its steps can be published again'
elseif redrives == 0 then
  why = why .. ' (re-drives are off)'
else
  why = why .. string.format(', nor after %d re-drives', redrives)
end
for _, id in ipairs(idle) do
  local step = steps[id]
  if step.s == 'running' then
    step.s = 'failed'
    step.e = why
    step.t1 = now
    step.l = nil
    redis.call('HSET', run .. ':steps', id, cjson.encode(step))
  end
end
redis.call('HSET', run, 'status', 'failed', 'error', why, 'finished_at', now)
if named ~= '' then redis.call('HSET', run, 'failed_step', named) end
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs',
    run .. ':logs'}) do
  redis.call('PEXPIRE', key, tonumber(ARGV[4]))
end
redis.call('PUBLISH', run, 'failed')
return {'failed', named, redis.call('HGET', run, 'created_at'), pipeline, why}
