-- check: one check of one or more limits, all or nothing
-- (src/domain/algorithms/mod.rs, apply_all). All five algorithm functions
-- are defined before this file.
--
-- A check is allowed iff every limit allows `cost`; only then does every
-- limit spend it. With one limit that is the algorithm's own call. With
-- several, a first pass runs each function with `dry` set (it decides and
-- reports what it would leave, writing nothing),
-- and only if all allowed does a second pass run them again to write: same
-- state, same now, so the same outcomes. The keys of one check are distinct
-- and share the client key's hash tag, so the whole check is one slot.
--
-- Returns 4 values per limit, appended to `reply`: allowed (1|0),
-- remaining, retry_after_us, reset_after_us; each what that limit alone
-- decided.

local by_tag = {fw = fixed_window, sw = sliding_window, sl2 = sliding_log, tb = token_bucket, gcra = gcra}

-- The limits' keys are KEYS[k + 1 .. k + n]; limit i's arguments are
-- ARGV[a + 4 (i - 1) + 1 ..]: algorithm tag, limit, window in microseconds,
-- burst.
local function check_all(k, a, n, now, cost, pad_ms, reply)
  local dry = n > 1
  local all = true
  local base = #reply
  for i = 1, n do
    local s = a + 4 * (i - 1)
    local result = by_tag[ARGV[s + 1]](KEYS[k + i], now, tonumber(ARGV[s + 2]),
      tonumber(ARGV[s + 3]), cost, tonumber(ARGV[s + 4]), pad_ms, dry)
    if result[1] ~= 1 then
      all = false
    end
    for j = 1, 4 do
      reply[base + 4 * (i - 1) + j] = result[j]
    end
  end
  if dry and all and cost > 0 then
    for i = 1, n do
      local s = a + 4 * (i - 1)
      by_tag[ARGV[s + 1]](KEYS[k + i], now, tonumber(ARGV[s + 2]),
        tonumber(ARGV[s + 3]), cost, tonumber(ARGV[s + 4]), pad_ms, false)
    end
  end
  return reply
end
