-- Create a run, or return it when it exists already: a run started with an idempotency key has the id
-- the key derives (naming.run_id_for_key), so a second start with the key finds the first run here.
-- KEYS[1] run key (every key this script touches extends it, so it runs in one Redis Cluster slot)
-- ARGV: run_id, pipeline, retention_ms, idempotency_key, n_steps, n_starts, correlation id,
--       deadline in ms from now (0 for none), trace id ('' for none), what the first steps receive
--       (json, '' for none), ms until the first steps are due (their start delay), whether the trace
--       is sampled ('1', or '0': only its failed or slow steps are exported), the run's input (json
--       [args, kwargs] as given, '' for none), whether a registered name started it ('1' or '0'), the
--       run it re-runs ('' for none),
--       then n_steps pairs (step id, step json), then n_starts triples (step id, leaves json, entry ids):
--       where steps start, the first ones under the root's id and each chain continuation under its own
-- A run is touched (see stall.lua) when its first steps are due.
local run = KEYS[1]
local ttl = tonumber(ARGV[3])
if redis.call('EXISTS', run) == 1 then return {0, ARGV[1]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', run, 'id', ARGV[1], 'pipeline', ARGV[2], 'status', 'pending', 'created_at', now,
  'idempotency_key', ARGV[4], 'correlation_id', ARGV[7], 'touched', now + tonumber(ARGV[11]))
if tonumber(ARGV[8]) > 0 then redis.call('HSET', run, 'deadline_at', now + tonumber(ARGV[8])) end
if ARGV[9] ~= '' then redis.call('HSET', run, 'trace_id', ARGV[9], 'trace_sampled', ARGV[12]) end
if ARGV[10] ~= '' then redis.call('HSET', run .. ':inputs', '0', ARGV[10]) end
if ARGV[13] ~= '' then redis.call('HSET', run, 'input', ARGV[13]) end
if ARGV[14] == '1' then redis.call('HSET', run, 'registered', '1') end
if ARGV[15] ~= '' then redis.call('HSET', run, 'rerun_of', ARGV[15]) end
local i = 16
for _ = 1, tonumber(ARGV[5]) do
  redis.call('HSET', run .. ':steps', ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, tonumber(ARGV[6]) do
  redis.call('HSET', run .. ':starts', ARGV[i], ARGV[i + 1])
  redis.call('HSET', run .. ':entries', ARGV[i], ARGV[i + 2])
  i = i + 3
end
for _, key in ipairs({run, run .. ':steps', run .. ':starts', run .. ':entries', run .. ':inputs'}) do
  redis.call('PEXPIRE', key, ttl)
end
return {1, ARGV[1]}
