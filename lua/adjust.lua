-- adjust: reset and refund of one operation's limits
-- (src/domain/algorithms/mod.rs, reset_all and refund_all), on the limits
-- at KEYS[k + 1 .. k + n] and ARGV[a + 1 ..] as check_all takes them. The
-- algorithm functions, their refunds (`refund_by_tag`, generated) and
-- check_all are defined before this file. Both answer like a check of cost
-- 0 afterwards, appended to `reply`.
--
-- The keys of one operation share the client key's hash tag, so each is
-- one slot, like a check.

-- Deletes every limit's state.
local function reset_all(k, a, n, now, pad_ms, reply)
  for i = 1, n do
    redis.call('DEL', KEYS[k + i])
  end
  return check_all(k, a, n, now, 0, pad_ms, reply)
end

-- Gives back up to `cost` on every limit, each on its own: a refund only
-- ever makes room, so there is nothing to decide all or nothing.
local function refund_all(k, a, n, now, cost, pad_ms, reply)
  if cost > 0 then
    for i = 1, n do
      local s = a + LIMIT_ARGS * (i - 1)
      refund_by_tag[ARGV[s + 1]](KEYS[k + i], now, tonumber(ARGV[s + 2]),
        window_arg(ARGV[s + 3]), cost, tonumber(ARGV[s + 4]), pad_ms)
    end
  end
  return check_all(k, a, n, now, 0, pad_ms, reply)
end
