-- The stall sweep's clock: the store's time now, and since when the sweep has looked without a gap.
-- A gap (no sweep for longer than gap_ms: the store, or every worker, was down) restarts the clock, so
-- runs that nothing could advance during the gap are not taken for stalled before their time.
-- KEYS[1] the sweep's hash; ARGV: gap_ms, retention_ms
-- Returns {now ms, resumed ms}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen') or '0')
if now - seen > tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'resumed', now) end
redis.call('HSET', KEYS[1], 'seen', now)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return {now, tonumber(redis.call('HGET', KEYS[1], 'resumed'))}
