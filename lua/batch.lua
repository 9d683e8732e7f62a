-- batch: several checks in one call, applied in order, each exactly as it
-- would run alone (src/store/batch.rs sends them). All five algorithm
-- functions are defined before this file.
-- KEYS[i]  the state of check i
-- ARGV[1]  now in microseconds, or '' to use Redis TIME (one reading for the
--          whole batch: the checks arrived together)
-- ARGV[2]  extra TTL in milliseconds
-- ARGV[3 + 5 (i - 1) ...]  check i: algorithm tag (fw, sw, sl2, tb, gcra),
--          limit, window in microseconds, cost, burst
-- Reply    4 numbers per check, flattened: allowed, remaining, retry_after_us, reset_after_us

local by_tag = {fw = fixed_window, sw = sliding_window, sl2 = sliding_log, tb = token_bucket, gcra = gcra}
local now = clock(ARGV[1])
local pad_ms = tonumber(ARGV[2])
local reply = {}
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 5
  local result = by_tag[ARGV[a]](KEYS[i], now, tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]),
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), pad_ms)
  for j = 1, 4 do
    reply[#reply + 1] = result[j]
  end
end
return reply
