-- adjust: reset, refund, settle, release, renewal and give-back of one
-- operation's limits (src/domain/algorithms/mod.rs, reset_all, refund_all
-- and lease_all; src/domain/algorithms/settle.rs, settle_all;
-- src/domain/algorithms/give_back.rs, give_back_all), on the limits
-- at KEYS[k + 1 .. k + n] and ARGV[a + 1 ..] as check_all takes them. The
-- algorithm functions, their refunds (`refund_by_tag`, generated), their
-- give-backs (`give_back_by_tag`, generated, the windows only) and
-- check_all are defined before this file. Each answers like a check of cost
-- 0 afterwards, appended to `reply`.
--
-- The keys of one operation share the client key's hash tag, so each is
-- one slot, like a check.

-- Deletes every limit's state.
local function reset_all(k, a, n, now, pad_ms, reply)
  for i = 1, n do
    redis.call('DEL', KEYS[k + i])
  end
  return check_all(k, a, n, now, 0, pad_ms, reply, 0)
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
  return check_all(k, a, n, now, 0, pad_ms, reply, 0)
end

-- Gives back up to `cost` units that a check of these limits counted at
-- store time `at`, each limit on its own (give_back.rs says why this is
-- exact). Every limit's algorithm must have a give-back: all are looked at
-- before any is written, so one without fails the operation (under the
-- pcall of ops.lua) with nothing written, as in the Rust.
local function give_back_all(k, a, n, now, at, cost, pad_ms, reply)
  for i = 1, n do
    local tag = ARGV[a + LIMIT_ARGS * (i - 1) + 1]
    if give_back_by_tag[tag] == nil then
      error('give back is only defined for fixed_window and sliding_window, not the algorithm tagged ' .. tag, 0)
    end
  end
  if cost > 0 then
    for i = 1, n do
      local s = a + LIMIT_ARGS * (i - 1)
      give_back_by_tag[ARGV[s + 1]](KEYS[k + i], now, at, window_arg(ARGV[s + 3]), cost)
    end
  end
  return check_all(k, a, n, now, 0, pad_ms, reply, 0)
end

-- Spends `cost` more on every limit without a check (settle.rs,
-- State::spend): the algorithm's own check against its capacity raised
-- OVERDRAFT_CAPACITIES times (`burst` for the algorithms in `has_burst`,
-- `limit` for the others), first a look of cost 0 for the room, then a
-- check of what fits, which the raised capacity always allows. So the
-- state, its expiry and the bound on the usage a settle leaves are the
-- check's own.
local function spend_all(k, a, n, now, cost, pad_ms)
  for i = 1, n do
    local s = a + LIMIT_ARGS * (i - 1)
    local tag = ARGV[s + 1]
    local limit, window, burst = tonumber(ARGV[s + 2]), window_arg(ARGV[s + 3]), tonumber(ARGV[s + 4])
    local f = by_tag[tag]
    if tag == CONCURRENCY_TAG then
      -- A settle moves no lease: only a release frees one.
      f = nil
    elseif f == token_bucket then
      token_bucket_upgrade(KEYS[k + i], burst)
    end
    if has_burst[tag] then
      burst = burst * OVERDRAFT_CAPACITIES
    else
      limit = limit * OVERDRAFT_CAPACITIES
    end
    if f ~= nil then
      local _, room = f(KEYS[k + i], now, limit, window, 0, burst, pad_ms, false)
      local take = math.min(cost, room)
      if take > 0 then
        f(KEYS[k + i], now, limit, window, take, burst, pad_ms, false)
      end
    end
  end
end

-- Settles a reservation, `delta` = actual - reserved (wire.rs): below it a
-- refund of the difference, above it the difference spent without a
-- check, every limit on its own.
local function settle_all(k, a, n, now, delta, pad_ms, reply)
  if delta < 0 then
    return refund_all(k, a, n, now, -delta, pad_ms, reply)
  end
  if delta > 0 then
    spend_all(k, a, n, now, delta, pad_ms)
  end
  return check_all(k, a, n, now, 0, pad_ms, reply, 0)
end

-- Reservations (src/domain/reservation.rs): a record beside the check's
-- state (same hash tag), at the key that follows the operation's limits'
-- keys; `rsv` is '<ttl_ms>:<digest>' (wire.rs). The record holds the
-- digest; '<digest>+<drawn>+<seq>' once drawn on (the units drawn since the
-- check, the last allowed draw's number); '<digest>:<delta>' once settled
-- (delta = actual - reserved: the reservation fixes `reserved`, so equal
-- deltas are equal actuals), '<digest>:<delta>:<drawn>' if it was drawn on.
-- src/store/memory/reservations.rs is the twin.

-- After a check: records the reservation if every limit allowed (the
-- values check_all wrote into `reply` from `base + 1`), living ttl_ms.
local function reserve(key, rsv, reply, base, n)
  for i = 1, n do
    if reply[base + 4 * (i - 1) + 1] ~= 1 then
      return
    end
  end
  local ttl, digest = string.match(rsv, '^(%d+):(%x+)$')
  redis.call('SET', key, digest, 'PX', ttl)
end

-- The record at `key` of the reservation `rsv`: its digest, and
-- 'open', drawn, seq; or 'settled', drawn, delta (as text); or nil when
-- missing, expired or of another digest.
local function read_record(key, rsv)
  local _, digest = string.match(rsv, '^(%d+):(%x+)$')
  local record = redis.call('GET', key)
  if not record then
    return digest, nil
  end
  if record == digest then
    return digest, 'open', 0, 0
  end
  local head, rest = string.sub(record, 1, #digest + 1), string.sub(record, #digest + 2)
  if head == digest .. '+' then
    local drawn, seq = string.match(rest, '^(%d+)%+(%d+)$')
    return digest, 'open', tonumber(drawn), tonumber(seq)
  elseif head == digest .. ':' then
    local delta, drawn = string.match(rest, '^(%-?%d+):?(%d*)$')
    return digest, 'settled', tonumber(drawn) or 0, delta
  end
  return digest, nil
end

-- A settle of a reservation: only a live record holding the digest and not
-- settled yet is settled (1), against the reservation and everything drawn
-- on it (`delta` less the units drawn), and then says so, keeping its TTL;
-- settled before with the same delta answers 2, with another 3, and no
-- record (or another digest) 0. Every answer but 1 changes nothing and is
-- a look of cost 0. Answers '<code>:<drawn>'.
local function settle_reserved(k, a, n, now, delta, pad_ms, key, rsv)
  local digest, state, drawn, settled = read_record(key, rsv)
  local found = 0
  if state == 'open' then
    found = 1
  elseif state == 'settled' then
    found = (settled == tostring(int(delta))) and 2 or 3
  end
  if found ~= 1 then
    return check_all(k, a, n, now, 0, pad_ms, {}, 0), found .. ':' .. int(drawn or 0)
  end
  local reply = settle_all(k, a, n, now, delta - drawn, pad_ms, {})
  local mark = digest .. ':' .. int(delta)
  if drawn > 0 then
    mark = mark .. ':' .. int(drawn)
  end
  redis.call('SET', key, mark, 'KEEPTTL')
  return reply, '1:' .. int(drawn)
end

-- A draw on a reservation (OpKind::Draw, src/store/op.rs): on a live,
-- unsettled record whose last allowed draw is numbered below `seq`, a
-- check of `cost` on every limit, all or nothing; if allowed the record
-- adds `cost` and keeps `seq`, keeping its TTL. Answers the check (or a
-- look of cost 0 when the record refused) and '<code>:<drawn>' (Drawn's
-- codes: 0 unknown, 1 drawn now, 2 denied, 3 the same seq again, 4 a
-- later seq drawn already, 5 settled).
local function draw_reserved(k, a, n, now, cost, pad_ms, seq, mode, key, rsv)
  local digest, state, drawn, last = read_record(key, rsv)
  local found
  if state == nil then
    found = 0
  elseif state == 'settled' then
    found = 5
  elseif last > 0 and seq == last then
    found = 3
  elseif seq < last then
    found = 4
  end
  if found ~= nil then
    return check_all(k, a, n, now, 0, pad_ms, {}, 0), found .. ':' .. int(drawn or 0)
  end
  if mode == 'p' then
    -- A peek: only what the record says; one it lets go ahead answers
    -- 'denied' (the draw's other cluster slots denied).
    return check_all(k, a, n, now, 0, pad_ms, {}, 0), '2:' .. int(drawn)
  end
  local reply
  if mode == 'r' then
    -- Only the record: its limits were checked and spent already.
    reply = check_all(k, a, n, now, 0, pad_ms, {}, 0)
  else
    reply = check_all(k, a, n, now, cost, pad_ms, {}, 0)
    for i = 1, n do
      if reply[4 * (i - 1) + 1] ~= 1 then
        return reply, '2:' .. int(drawn)
      end
    end
  end
  drawn = drawn + cost
  redis.call('SET', key, digest .. '+' .. int(drawn) .. '+' .. int(seq), 'KEEPTTL')
  return reply, '1:' .. int(drawn)
end

-- Releases (`renew` false) or renews `lease` on the concurrency limits
-- (src/domain/algorithms/mod.rs, lease_all), then answers like a check of
-- cost 0. Also returns whether the lease was live: -1 when no limit is a
-- concurrency limit, else 1 or 0.
local function lease_all(k, a, n, now, lease, renew, pad_ms, reply)
  local live = -1
  for i = 1, n do
    local s = a + LIMIT_ARGS * (i - 1)
    if ARGV[s + 1] == CONCURRENCY_TAG then
      local was
      if renew then
        was = concurrency_renew(KEYS[k + i], now, tonumber(ARGV[s + 3]), lease, pad_ms)
      else
        was = concurrency_release(KEYS[k + i], now, lease)
      end
      if was then
        live = 1
      elseif live == -1 then
        live = 0
      end
    end
  end
  return check_all(k, a, n, now, 0, pad_ms, reply, 0), live
end

-- Every operation but a check, by its generated code (ops.lua dispatches
-- here): its answer (4 values per limit, in a table of its own) and `live`,
-- -1 when it has nothing to say, 1 when it did what it was asked, any other
-- value when it changed nothing (a release of a lease that was not live;
-- for a settle of a reservation, `rsv` not '' and its record at
-- KEYS[k + n + 1], what the record said). An operation is one entry here.
local ADJUST = {
  [OP_RELEASE] = function(k, a, n, now, _, pad_ms, lease)
    return lease_all(k, a, n, now, lease, false, pad_ms, {})
  end,
  [OP_RENEW] = function(k, a, n, now, _, pad_ms, lease)
    return lease_all(k, a, n, now, lease, true, pad_ms, {})
  end,
  [OP_RESET] = function(k, a, n, now, _, pad_ms)
    return reset_all(k, a, n, now, pad_ms, {}), -1
  end,
  [OP_REFUND] = function(k, a, n, now, cost, pad_ms)
    return refund_all(k, a, n, now, cost, pad_ms, {}), -1
  end,
  -- A settle's amount is actual - reserved, signed (Op::amount).
  [OP_SETTLE] = function(k, a, n, now, delta, pad_ms, _, rsv)
    if rsv ~= '' then
      return settle_reserved(k, a, n, now, delta, pad_ms, KEYS[k + n + 1], rsv)
    end
    return settle_all(k, a, n, now, delta, pad_ms, {}), -1
  end,
  -- The store time of the check given back for travels in the lease's
  -- slot (wire.rs).
  [OP_GIVE_BACK] = function(k, a, n, now, cost, pad_ms, at)
    return give_back_all(k, a, n, now, tonumber(at), cost, pad_ms, {}), -1
  end,
  -- A draw's number travels in the lease's slot too, after `p` for a
  -- peek and `r` for the record only (DrawMode); its reservation's record
  -- follows its limits' keys.
  [OP_DRAW] = function(k, a, n, now, cost, pad_ms, seq, rsv)
    local mode, s = string.match(seq, '^([pr]?)(%d+)$')
    return draw_reserved(k, a, n, now, cost, pad_ms, tonumber(s), mode, KEYS[k + n + 1], rsv)
  end,
}
