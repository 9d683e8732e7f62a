-- adjust: reset and refund of one check's limits (src/domain/algorithms/mod.rs,
-- reset_all and refund_all). The algorithm functions, their refunds and
-- check_all are defined before this file. KEYS and ARGV are those of
-- check.lua (see lib.lua); ARGV[3] is the refund's cost (reset ignores it),
-- and the last two are the invalidation channel and the client key.
-- Both answer like a check of cost 0 afterwards: 4 values per limit, then
-- 1 if the invalidation was published, 0 if PUBLISH failed.
--
-- The keys of one check share the client key's hash tag, so this is one
-- slot, like a check.

-- Tells every instance's deny cache that the client key's state changed
-- (src/store/redis/invalidation.rs). Here rather than in a call of its
-- own: one round trip, and a reset whose reply was lost has published all
-- the same. PUBLISH takes no key, so a cluster script may run it, and it
-- travels over the cluster bus. Under pcall: an ACL user without the
-- channel must not fail the reset itself; the flag tells the caller.
local function published(reply)
  local ok = pcall(redis.call, 'PUBLISH', ARGV[#ARGV - 1], ARGV[#ARGV])
  reply[#reply + 1] = ok and 1 or 0
  return reply
end

local refund_by_tag = {fw = fixed_window_refund, sw = sliding_window_refund,
  sl2 = sliding_log_refund, tb = token_bucket_refund, gcra = gcra_refund}

-- Deletes every limit's state.
local function reset_all(now, pad_ms)
  for i = 1, #KEYS do
    redis.call('DEL', KEYS[i])
  end
  return published(check_all(0, 3, #KEYS, now, 0, pad_ms, {}))
end

-- Gives back up to `cost` on every limit, each on its own: a refund only
-- ever makes room, so there is nothing to decide all or nothing.
local function refund_all(now, cost, pad_ms)
  if cost > 0 then
    for i = 1, #KEYS do
      local s = 3 + 4 * (i - 1)
      refund_by_tag[ARGV[s + 1]](KEYS[i], now, tonumber(ARGV[s + 2]),
        tonumber(ARGV[s + 3]), cost, tonumber(ARGV[s + 4]), pad_ms)
    end
  end
  return published(check_all(0, 3, #KEYS, now, 0, pad_ms, {}))
end
