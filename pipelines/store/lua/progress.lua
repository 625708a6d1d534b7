-- Record a running step's progress (unless fraction is ''), and tell the caller the run's state.
-- KEYS[1] run key; ARGV: step id, fraction ('' for none), text
-- Returns the run's status, or false when the run is unknown
local run = KEYS[1]
local status = redis.call('HGET', run, 'status')
if not status then return false end
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
