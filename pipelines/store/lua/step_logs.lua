-- Keep the log records of a step's attempt, beside the records of its earlier attempts.
-- KEYS[1] run key; ARGV: step id, the claim the attempt ran under ('' for none), the attempt's logs
--       (json: {n: attempt, d: records dropped, c: record count, s: bytes, r: records}), the most
--       records and bytes a step keeps, retention_ms, '1' to keep them even when a later claim holds the
--       step (a failed attempt overtaken by its retry: its logs go before the later attempts')
-- The newest attempts are kept whole while their records fit the bounds (the newest always: its worker
-- bounded it already). Returns how many attempts' logs the step keeps (0: nothing was kept, because
-- the run or the step is unknown, or the attempt had lost its claim)
local run = KEYS[1]
local raw = redis.call('HGET', run .. ':steps', ARGV[1])
if not raw then return 0 end
local claim = tonumber(ARGV[2] or '')
local current = cjson.decode(raw).n or 0
if claim and current ~= claim and not (ARGV[7] == '1' and claim < current) then return 0 end
local logs = run .. ':logs'
local old = redis.call('HGET', logs, ARGV[1])
local readable, blocks = pcall(cjson.decode, old or '[]')
if not readable then blocks = {} end  -- what cannot be read is replaced: logs never stop a step's record
local new = cjson.decode(ARGV[3])
local at = #blocks + 1
while at > 1 and (tonumber(blocks[at - 1].n) or 0) > (tonumber(new.n) or 0) do at = at - 1 end
table.insert(blocks, at, new)
local records, bytes, first = 0, 0, #blocks
for i = #blocks, 1, -1 do
  records, bytes = records + blocks[i].c, bytes + blocks[i].s
  if i < #blocks and (records > tonumber(ARGV[4]) or bytes > tonumber(ARGV[5])) then break end
  first = i
end
local kept = {}
for i = first, #blocks do table.insert(kept, cjson.encode(blocks[i])) end
redis.call('HSET', logs, ARGV[1], '[' .. table.concat(kept, ',') .. ']')
redis.call('PEXPIRE', logs, tonumber(ARGV[6]))
return #kept
