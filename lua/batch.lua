-- batch: several checks in one call, applied in order, each exactly as it
-- would run alone (src/store/redis/batch.rs sends them). All five algorithm
-- functions are defined before this file.
-- KEYS[i]  the state of check i
-- ARGV[1]  now in microseconds, or '' to use Redis TIME (one reading for the
--          whole batch: the checks arrived together)
-- ARGV[2]  extra TTL in milliseconds
-- ARGV[3 + 5 (i - 1) ...]  check i: algorithm tag (fw, sw, sl2, tb, gcra),
--          limit, window in microseconds, cost, burst
-- Reply    4 values per check, flattened: allowed, remaining, retry_after_us,
--          reset_after_us; or, for a check that raised an error (a key of the
--          wrong type, or Redis refusing the write: OOM, READONLY, an ACL),
--          -1, the error message, 0, 0. The message keeps Redis's code
--          first, so the store classifies it as it would a direct call's.
-- Each check runs under pcall, so one bad key fails only its own check: the
-- checks before it keep their writes (Redis cannot roll them back) and the
-- ones after it still run.

local by_tag = {fw = fixed_window, sw = sliding_window, sl2 = sliding_log, tb = token_bucket, gcra = gcra}
local now = clock(ARGV[1])
local pad_ms = tonumber(ARGV[2])
local reply = {}
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 5
  local ok, result = pcall(by_tag[ARGV[a]], KEYS[i], now, tonumber(ARGV[a + 1]),
    tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), pad_ms)
  if not ok then
    -- redis.call raises a table {err = ...}; Lua itself raises strings.
    if type(result) == 'table' and result.err then
      result = result.err
    end
    result = {-1, tostring(result), 0, 0}
  end
  for j = 1, 4 do
    reply[#reply + 1] = result[j]
  end
end
return reply
