-- Renew the claim of an idempotency key, while this holder still holds it.
-- KEYS[1] the key; ARGV: holder, lease_ms
-- Returns 1 (renewed) | 0 (lost: it lapsed, and another holder claimed it or it was recorded done)
if redis.call('GET', KEYS[1]) ~= 'held:' .. ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
