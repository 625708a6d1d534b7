-- Claim an idempotency key for one delivery: run it, skip it (done before), or wait (held elsewhere).
-- KEYS[1] the key; ARGV: holder (a token unique to this claim), lease_ms
-- Returns {'run'} | {'done'} | {'busy', wait_ms}
local value = redis.call('GET', KEYS[1])
if value == 'done' then return {'done'} end
if value then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then return {'busy', ttl} end
end
redis.call('SET', KEYS[1], 'held:' .. ARGV[1], 'PX', tonumber(ARGV[2]))
return {'run'}
