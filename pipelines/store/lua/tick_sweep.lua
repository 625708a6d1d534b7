-- Sweep a scheduled job's ticks, in order, for the ones nobody claimed: each tick is swept once.
-- KEYS[1] the job's sweep mark (every tick up to it was claimed or counted missed), KEYS[1 + i] the
-- tick key of ARGV[2 + i]; ARGV: cutoff (ticks after it may still be claimed), through (the mark
-- after this sweep), then the cron's ticks in order.
-- Returns the missed ticks (unclaimed, at or before the cutoff, after the mark), oldest first; none
-- while the tick after the last missed one is still undecided (the outage may go on: the run of
-- missed ticks is then swept whole next time, so a catch-up is sent once for its latest tick).
local mark = tonumber(redis.call('GET', KEYS[1]) or '')
if not mark then return {} end
local cutoff, through = tonumber(ARGV[1]), tonumber(ARGV[2])
local missed, open = {}, false
for i = 3, #ARGV do
  local tick = tonumber(ARGV[i])
  if tick > mark then
    local claimed = redis.call('EXISTS', KEYS[i - 1]) == 1
    if tick > cutoff then
      if open and not claimed then
        redis.call('SET', KEYS[1], string.format('%d', missed[1] - 1))
        return {}
      end
      break
    end
    if claimed then open = false else missed[#missed + 1] = tick; open = true end
  end
end
if through > mark then redis.call('SET', KEYS[1], string.format('%d', through)) end
return missed
