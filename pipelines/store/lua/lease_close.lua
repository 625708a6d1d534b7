-- Close a long-running job's lease: the job ended. The lease is kept (for the rest of the retention
-- period it was opened with) as a record that the job ended, so a copy of its message is not run again.
-- KEYS[1] lease key
-- Returns 1 when closed, 0 when there was no lease
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[1], 'holder', 'until', 'record')
redis.call('HSET', KEYS[1], 'ended', '1')
return 1
