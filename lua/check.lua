-- check: one check of one or more limits, all or nothing
-- (src/domain/algorithms/mod.rs, apply_all). All five algorithm functions
-- are defined before this file.
--
-- A check is allowed iff every limit allows `cost`; only then does every
-- limit spend it. With one limit that is the algorithm's own call. With
-- several, a first pass runs each function with `dry` set: it decides,
-- reports what it would leave, writes nothing, and hands back the writes
-- it would have made as a function. Only if all allowed (and cost > 0)
-- are those run. They hold the values the first pass computed, so the
-- state is read once: a redis.call costs about 2 µs inside Redis, and a
-- second pass that read and decided again made a gcra + fixed_window call
-- cost 18.5 µs of Redis time; reading once, 15.0, against 7.7 and 9.5 for
-- each limit alone (2.9 of which any call of this script costs). The keys
-- of one check are distinct and share the client key's hash tag, so the
-- whole check is one slot. If any limit denied, nothing is spent, and each
-- limit that would have allowed is looked at again at cost 0 (dry), so it
-- reports its state as it is rather than after a spend that did not happen.
--
-- Returns 4 values per limit, appended to `reply`: allowed (1|0),
-- remaining, retry_after_us, reset_after_us.

local by_tag = {fw = fixed_window, sw = sliding_window, sl2 = sliding_log, tb = token_bucket, gcra = gcra}

-- The limits' keys are KEYS[k + 1 .. k + n]; limit i's arguments are
-- ARGV[a + 4 (i - 1) + 1 ..]: algorithm tag, limit, window in microseconds,
-- burst.
local function check_all(k, a, n, now, cost, pad_ms, reply)
  local dry = n > 1
  local all = true
  local base = #reply
  local commits = {}
  for i = 1, n do
    local s = a + 4 * (i - 1)
    local result = by_tag[ARGV[s + 1]](KEYS[k + i], now, tonumber(ARGV[s + 2]),
      tonumber(ARGV[s + 3]), cost, tonumber(ARGV[s + 4]), pad_ms, dry)
    if result[1] ~= 1 then
      all = false
    end
    commits[i] = result[5]
    for j = 1, 4 do
      reply[base + 4 * (i - 1) + j] = result[j]
    end
  end
  if dry and all and cost > 0 then
    -- Every limit allowed a positive cost, so each handed back its writes.
    for i = 1, n do
      commits[i]()
    end
  elseif not all then
    for i = 1, n do
      local at = base + 4 * (i - 1)
      if reply[at + 1] == 1 then
        local s = a + 4 * (i - 1)
        local look = by_tag[ARGV[s + 1]](KEYS[k + i], now, tonumber(ARGV[s + 2]),
          tonumber(ARGV[s + 3]), 0, tonumber(ARGV[s + 4]), pad_ms, true)
        for j = 1, 4 do
          reply[at + j] = look[j]
        end
      end
    end
  end
  return reply
end
