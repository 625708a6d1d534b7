-- Look at a run that had a step claimed where the step before it finished (a local step, marked 'loc'),
-- once that step's lease would have lapsed: one still held (its worker renews the lease), none running
-- any more, or running with its lease lapsed (its worker died: nothing of the step is in RabbitMQ). Those
-- are handed back to be published again, as claim.lua would hand a redelivered copy the step. Steps
-- claimed from a delivery are left alone: RabbitMQ delivers them again.
-- KEYS[1] run key
-- Returns {'gone'} (ended, or past retention) | {'alive', earliest lease end ms} | {'none'}
--   | {'redrive', 0, now, pipeline, correlation id, then per group of lapsed steps:
--      group id, leaves json, input json, lapsed step ids (space-separated)}
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if status ~= 'pending' and status ~= 'running' then return {'gone'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local flat = redis.call('HGETALL', run .. ':steps')
local lapsed, held = {}, nil
for i = 1, #flat, 2 do
  local step = cjson.decode(flat[i + 1])
  if step.s == 'running' and step.l and step.loc then
    if step.l <= now then
      lapsed[flat[i]] = step
    elseif not held or step.l < held then
      held = step.l
    end
  end
end
if next(lapsed) == nil then
  if held then return {'alive', held} end
  return {'none'}
end

local reply = {'redrive', 0, now, redis.call('HGET', run, 'pipeline') or '', redis.call('HGET', run, 'correlation_id') or ''}
local inputs = redis.call('HGETALL', run .. ':inputs')
for i = 1, #inputs, 2 do
  local ids = redis.call('HGET', run .. ':entries', inputs[i])
  local found = {}
  for id in string.gmatch(ids or '', '%S+') do
    local step = lapsed[id]
    if step then
      -- Its claim stands until another is made: the copy published now claims the step as a retry.
      step.s = 'retrying'
      step.l = nil
      redis.call('HSET', run .. ':steps', id, cjson.encode(step))
      table.insert(found, id)
    end
  end
  if #found > 0 then
    local leaves = redis.call('HGET', run .. ':starts', inputs[i]) or '[]'
    for _, item in ipairs({inputs[i], leaves, inputs[i + 1], table.concat(found, ' ')}) do
      table.insert(reply, item)
    end
  end
end
if #reply == 5 then return {'alive', now} end
redis.call('HSET', run, 'touched', now)
redis.call('PUBLISH', run, 'step')
return reply
