-- Link a run to a run that re-runs it, so the original shows its re-runs.
-- KEYS[1] the original's run key (its ':reruns' list extends it: one Redis Cluster slot)
-- ARGV[1] the re-run's id
-- The list lives as long as the original's record; a run past its retention gets no link.
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then return 0 end
redis.call('RPUSH', KEYS[1] .. ':reruns', ARGV[1])
redis.call('PEXPIRE', KEYS[1] .. ':reruns', ttl)
return 1
