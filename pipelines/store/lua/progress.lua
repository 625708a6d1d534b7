-- Record a running step's progress (unless fraction is ''), and tell the caller the run's state.
-- KEYS[1] run key; ARGV: step id, fraction ('' for none), text
-- Returns the run's status, 'deadline' when the run is past its deadline and not failed yet (the caller
-- fails it, deadline.lua), or false when the run is unknown
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if not status then return false end
local deadline = tonumber(redis.call('HGET', run, 'deadline_at') or '0')
if deadline > 0 and (status == 'pending' or status == 'running') then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline then return 'deadline' end
end
if ARGV[2] ~= '' then
  local raw = redis.call('HGET', run .. ':steps', ARGV[1])
  if raw then
    local step = cjson.decode(raw)
    step.p = tonumber(ARGV[2])
    step.pt = ARGV[3]
    redis.call('HSET', run .. ':steps', ARGV[1], cjson.encode(step))
    redis.call('PUBLISH', run, 'step')
  end
end
return status
