-- Take a rate limit's slot for a message about to run, or reserve it a later one.
-- KEYS[1] the limit's next free slot (shared with reserve.lua), KEYS[2] its latest run times (newest first)
-- ARGV: interval_ms, window_count, window_ms, held_ms (the slot the message holds, 0 for none), grace_ms
-- Returns {0, now} to run now, or {ms to wait, the slot reserved for it}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local held = tonumber(ARGV[4])
local grace = tonumber(ARGV[5])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
-- The hard bound: at most `count` runs in any window of `window_ms` ending now.
local free_at = now
if redis.call('LLEN', KEYS[2]) >= count then
  free_at = math.max(now, tonumber(redis.call('LINDEX', KEYS[2], count - 1)) + window)
end
-- A slot reserved for this message (by its producer, or when it was put off) is honoured when it is due.
local holds = held > 0 and math.abs(now - held) <= grace
if free_at <= now and (holds or tat <= now) then
  redis.call('LPUSH', KEYS[2], now)
  redis.call('LTRIM', KEYS[2], 0, count - 1)
  redis.call('PEXPIRE', KEYS[2], window + grace)
  if not holds then
    redis.call('SET', KEYS[1], now + interval, 'PX', interval + grace)
  end
  return {0, now}
end
-- A message whose slot is due but the window is full waits only for the window; any other takes the
-- next free slot, behind every slot already reserved.
local slot
if holds then
  slot = free_at
else
  slot = math.max(tat, free_at)
  redis.call('SET', KEYS[1], slot + interval, 'PX', slot - now + interval + grace)
end
return {slot - now, slot}
