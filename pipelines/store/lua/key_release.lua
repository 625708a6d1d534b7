-- Let go of an idempotency key after a failure, if this claim still holds it (so a retry may claim it).
-- KEYS[1] the key; ARGV: holder (the token given to key_claim)
if redis.call('GET', KEYS[1]) == 'held:' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
