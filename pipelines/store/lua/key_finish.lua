-- Record an idempotency key done, whoever held it: a message with that key is skipped from now on.
-- KEYS[1] the key; ARGV: retention in seconds
redis.call('SET', KEYS[1], 'done', 'EX', ARGV[1])
return 1
