-- Record a step's result and decide what follows, in one atomic step.
-- KEYS[1] run key; ARGV: step id, value json ('' to re-drive), frames json, retention_ms,
--       the step's trace parent ('' if not traced), the claim the attempt ran under ('' for none),
--       the worker that ran it (host:pid/thread, '' when unknown), the actors that worker runs steps
--       of where the step before finished (' a b ', '' for none), the lease of a step it claims so, in ms
-- Frames are the step's ancestors, nearest first: {kind ('c' chain | 'p' parallel), id, index, count}.
-- Returns {'start', step id, value, leaves json, released, member trace parents, chord wait ms}
--       | {'waiting'} | {'done', value, created_at, released, member trace parents, chord wait ms}
--       | {'local', step id, value, leaves json, released, member trace parents, chord wait ms, claim}
--       | {'duplicate'} | {'stopped', run_status} | {'missing'} | {'lost'}
--       | {'malformed', why}: the frames are not the step's ancestors in the stored plan, or its run has
--         not released the step yet (nothing changes)
-- (the step's latest attempt in its history (h) ends 'succeeded'; a step claimed here starts one)
-- ('local' is 'start' with the one step of the continuation claimed for this worker: complete-and-claim)
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
-- What a step's end may advance is the stored plan's, never the message's own say.
if step.u and ARGV[3] ~= step.u then return {'malformed', 'its ancestors are not the plan\'s ' .. step.u} end
-- Nor does a step end before its run released it (see claim.lua).
if step.r and step.s ~= 'succeeded' and redis.call('HEXISTS', run .. ':inputs', step.r) == 0 then
  return {'malformed', 'it is not due: its run has not released ' .. step.r .. ' yet'}
end
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
  if ARGV[7] and ARGV[7] ~= '' then step.w = ARGV[7] end
  step.l = nil
  step.e = nil
  local attempt = step.h and step.h[#step.h]
  if attempt and attempt.n == step.n and not attempt.o then attempt.b, attempt.o = now, 'succeeded' end
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

-- Complete-and-claim: a continuation of one pending step, of an actor this worker runs steps of where
-- the step before finished, is claimed for it here (as claim.lua would); its claim, or nil.
local function claim_here(leaves)
  if not ARGV[8] or ARGV[8] == '' or redrive or not leaves then return nil end
  local list = cjson.decode(leaves)
  if #list ~= 1 then return nil end
  local leaf = list[1]
  if type(leaf.actor) ~= 'string' or type(leaf.node) ~= 'string' then return nil end
  local opts = leaf.options or {}
  if opts.eta ~= nil or not string.find(ARGV[8], ' ' .. leaf.actor .. ' ', 1, true) then return nil end
  local raw_next = redis.call('HGET', run .. ':steps', leaf.node)
  if not raw_next then return nil end
  local next_step = cjson.decode(raw_next)
  if next_step.s ~= 'pending' then return nil end
  next_step.s = 'running'
  next_step.n = (next_step.n or 0) + 1
  next_step.t0 = next_step.t0 or now
  next_step.l = now + tonumber(ARGV[9])
  next_step.loc = 1  -- claimed here, not from a delivery: the lapse sweep publishes it if its worker dies
  if ARGV[7] ~= '' then next_step.w = ARGV[7] end
  next_step.h = next_step.h or {}
  table.insert(next_step.h, {n = next_step.n, a = now, w = ARGV[7] ~= '' and ARGV[7] or nil})
  if #next_step.h > 20 then table.remove(next_step.h, 1) end
  redis.call('HSET', run .. ':steps', leaf.node, cjson.encode(next_step))
  return next_step.n
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
      local leaves = redis.call('HGET', run .. ':starts', child)
      local claimed = claim_here(leaves)
      if claimed then return {'local', child, value, leaves, released, links, wait, claimed} end
      return {'start', child, value, leaves, released, links, wait}
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
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':results', run .. ':inputs',
    run .. ':logs'}) do
  redis.call('PEXPIRE', key, ttl)
end
return {'done', value, redis.call('HGET', run, 'created_at'), released, links, wait}
