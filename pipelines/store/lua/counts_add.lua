-- Add one worker process's message counts of a minute to the minute's record, kept a while after it.
-- KEYS[1] the minute's hash; ARGV[1] how long to keep it from now (ms), then field, count pairs: a
-- field of the measure "slowest" keeps the larger count, every other adds up.
-- Returns the number of fields changed.
for i = 2, #ARGV, 2 do
  local field, count = ARGV[i], tonumber(ARGV[i + 1])
  if string.sub(field, 1, 8) == 'slowest|' then
    local held = tonumber(redis.call('HGET', KEYS[1], field) or '0')
    if count > held then
      redis.call('HSET', KEYS[1], field, count)
    end
  else
    redis.call('HINCRBY', KEYS[1], field, count)
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return (#ARGV - 1) / 2
