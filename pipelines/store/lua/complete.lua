-- Record a step's result and decide what follows, in one atomic step.
-- KEYS[1] run key; ARGV: step id, value json ('' to re-drive), frames json, retention_ms,
--       the step's trace parent ('' if not traced), the claim the attempt ran under ('' for none)
-- Frames are the step's ancestors, nearest first: {kind ('c' chain | 'p' parallel), id, index, count}.
-- Returns {'start', step id, value, leaves json, released, member trace parents, chord wait ms}
--       | {'waiting'} | {'done', value, created_at, released, member trace parents, chord wait ms}
--       | {'duplicate'} | {'stopped', run_status} | {'missing'} | {'lost'}
-- (released is 1 when the step released a barrier; then member trace parents and chord wait describe
-- the last one it released)
local run = KEYS[1]
local node = ARGV[1]
local ttl = tonumber(ARGV[4])
local status = redis.call('HGET', run, 'status')
if not status then return {'missing'} end
local raw = redis.call('HGET', run .. ':steps', node)
if not raw then return {'missing'} end
local step = cjson.decode(raw)
-- An attempt whose lease lapsed and was claimed again may not complete the step: the later claim's will.
local claim = tonumber(ARGV[6] or '')
if claim and (step.n or 0) ~= claim then return {'lost'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local redrive = step.s == 'succeeded'
-- A step failed while it ran (its run passed its deadline) stays failed: its run ended
if step.s == 'failed' and status ~= 'pending' and status ~= 'running' then return {'stopped', status} end
if not redrive then
  if ARGV[2] == '' then return {'missing'} end
  step.s = 'succeeded'
  step.t1 = now
  step.l = nil
  step.e = nil
  redis.call('HSET', run .. ':steps', node, cjson.encode(step))
  redis.call('HINCRBY', run, 'done', 1)
  redis.call('HSET', run, 'touched', now)
  redis.call('PUBLISH', run, 'step')
end
if status ~= 'pending' and status ~= 'running' then return {'stopped', status} end

local frames = cjson.decode(ARGV[3])
local value = ARGV[2]
local first = frames[1]
if redrive then
  if first and first[1] == 'p' then
    value = redis.call('HGET', run .. ':bar:' .. first[2], tostring(first[3]))
  else
    value = redis.call('HGET', run .. ':results', node)
  end
  if not value then return {'duplicate'} end
elseif not first or first[1] == 'c' then
  redis.call('HSET', run .. ':results', node, value)
  redis.call('PEXPIRE', run .. ':results', ttl)
end

-- A continuation is handed out again on re-drive only while none of its steps has started.
local function already_started(child)
  local ids = redis.call('HGET', run .. ':entries', child)
  if not ids then return false end
  for id in string.gmatch(ids, '%S+') do
    local entry = redis.call('HGET', run .. ':steps', id)
    if entry and cjson.decode(entry).s == 'pending' then return false end
  end
  return true
end

local deadline = tonumber(redis.call('HGET', run, 'deadline_at') or '0')
local function past_deadline()
  if deadline > 0 and now > deadline then
    redis.call('HSET', run, 'status', 'failed', 'error', 'deadline exceeded', 'failed_step', node, 'finished_at', now)
    redis.call('PUBLISH', run, 'failed')
    return true
  end
  return false
end

local released, links, wait = 0, '', 0
for _, frame in ipairs(frames) do
  local kind, parent, index, count = frame[1], frame[2], frame[3], frame[4]
  if kind == 'c' then
    if index < count - 1 then
      local child = parent .. '.' .. (index + 1)
      if redrive and already_started(child) then return {'duplicate'} end
      if past_deadline() then return {'stopped', 'failed'} end
      -- What the continuation's steps receive, kept so that the stall sweep can publish them again.
      redis.call('HSET', run .. ':inputs', child, '[[' .. value .. '],{}]')
      redis.call('PEXPIRE', run .. ':inputs', ttl)
      return {'start', child, value, redis.call('HGET', run .. ':starts', child), released, links, wait}
    end
  else
    local barrier = run .. ':bar:' .. parent
    local meta = barrier .. ':meta'
    if redis.call('HSETNX', barrier, index, value) == 1 then
      redis.call('HSETNX', meta, 't0', now)
      if ARGV[5] ~= '' then redis.call('HSET', meta, index, ARGV[5]) end
      redis.call('PEXPIRE', barrier, ttl)
      redis.call('PEXPIRE', meta, ttl)
    elseif not redrive then
      return {'duplicate'}
    end
    if redis.call('HLEN', barrier) < count then return {'waiting'} end
    local flat = redis.call('HGETALL', barrier)
    local ordered = {}
    for j = 1, #flat, 2 do ordered[tonumber(flat[j]) + 1] = flat[j + 1] end
    value = '[' .. table.concat(ordered, ',') .. ']'
    local parents = {}
    local described = redis.call('HGETALL', meta)
    for j = 1, #described, 2 do
      if described[j] == 't0' then wait = now - tonumber(described[j + 1])
      else table.insert(parents, described[j + 1]) end
    end
    links = table.concat(parents, ' ')
    released = 1
  end
end

redis.call('HSET', run, 'status', 'succeeded', 'result', value, 'finished_at', now)
redis.call('PUBLISH', run, 'succeeded')
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs'}) do
  redis.call('PEXPIRE', key, ttl)
end
return {'done', value, redis.call('HGET', run, 'created_at'), released, links, wait}
