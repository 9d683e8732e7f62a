-- ops: the one entry point. A call carries a list of operations (checks,
-- resets, refunds, settles, releases, renewals, give-backs), applied in order, each exactly as it would run alone;
-- src/store/redis/wire.rs encodes them and documents KEYS, ARGV and the
-- reply. check.lua, adjust.lua and the algorithm functions are defined
-- before this file.
--
-- Each operation runs under pcall, so one bad key fails only its own
-- operation: the ones before it keep their writes (Redis cannot roll them
-- back) and the ones after it still run. Within a check the spending
-- writes all come after every read, so a refused write or a key of the
-- wrong type leaves none of its limits spent. (A check of one limit drops a
-- sliding log's expired entries while it reads, as the Rust function does;
-- a check of several writes nothing at all unless every limit allows.)
--
-- A reset, refund, settle, release or give-back tells every instance's deny
-- cache that the client key's state changed (src/store/redis/invalidation.rs;
-- wire.rs builds the message, marked for a give-back): from here rather
-- than in a call of its own, one round trip, and an operation whose reply
-- was lost has published all the same. PUBLISH takes no key, so a cluster
-- script may run it, and it travels over the cluster bus. Under pcall: an
-- ACL user without the channel must not fail the operation itself; the
-- flag tells the caller.

local now = clock(ARGV[1])
local pad_ms = tonumber(ARGV[2])
local channel = ARGV[3]

-- `m` counts what `reply` holds: appending by a counter rather than by
-- `#reply`, which Lua finds by a binary search each time.
local reply, m = {}, 0
local k, a, argc = 0, HEADER_ARGS, #ARGV
while a < argc do
  local op, n, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local publish, lease, rsv = ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  -- The operation's three leading values first, so that a check writes its
  -- answer straight after them into `reply` (no table of its own), in
  -- order (Lua keeps a table's array part only while it fills in order).
  -- A check's third is `now`, the store time it ran at (what a later
  -- give-back names); any other operation has a fourth for it (wire.rs).
  reply[m + 1], reply[m + 2], reply[m + 3] = 1, -1, now
  local ok, result, live
  if op == OP_CHECK then
    ok, result = pcall(check_all, k, a + OP_ARGS, n, now, cost, pad_ms, reply, m + 3, lease)
    if ok and rsv ~= '' then
      -- The reservation is part of the check: its failure is the check's.
      ok, result = pcall(reserve, KEYS[k + n + 1], rsv, reply, m + 3, n)
    end
  else
    -- Every other operation is adjust.lua's, found by its code; an unknown
    -- code fails its own operation only, under the same pcall.
    local adjust = ADJUST[op] or function()
      error('unknown operation ' .. tostring(op))
    end
    ok, result, live = pcall(adjust, k, a + OP_ARGS, n, now, cost, pad_ms, lease, rsv)
  end
  if ok then
    -- An adjustment whose `live` is neither -1 (nothing to say) nor 1
    -- changed nothing: a release of a lease that was not live, or a settle
    -- its reservation refused. Nobody to tell (and a caller cannot flush
    -- every instance's cache with made-up ids).
    -- A settle or draw naming a reservation answers '<code>:<drawn>'.
    local did = live
    if type(live) == 'string' then
      did = tonumber(string.match(live, '^(%d+)'))
    end
    local nothing = did ~= nil and did ~= -1 and did ~= 1
    if publish ~= '' and not nothing then
      reply[m + 2] = pcall(redis.call, 'PUBLISH', channel, publish) and 1 or 0
    end
    if op ~= OP_CHECK then
      reply[m + 3], reply[m + 4] = live, now
      for j = 1, 4 * n do
        reply[m + 4 + j] = result[j]
      end
      m = m + 1
    end
    m = m + 3 + 4 * n
  else
    -- redis.call raises a table {err = ...}; Lua itself raises strings.
    local message = result
    if type(message) == 'table' and message.err then
      message = message.err
    end
    -- A check may have written part of its answer before it failed: Redis
    -- reads the reply up to its first nil, so none of it may stay.
    for j = m + 3, m + 3 + 4 * n do
      reply[j] = nil
    end
    reply[m + 1], reply[m + 2] = -1, tostring(message)
    m = m + 2
  end
  k, a = k + n, a + OP_ARGS + LIMIT_ARGS * n
  if rsv ~= '' then
    -- The reservation's record key.
    k = k + 1
  end
end
return reply
