-- sliding_window: weighted count over the current and previous windows
-- (src/domain/algorithms/sliding_window.rs).
-- key      hash {i = current window index, p = previous count, c = current
--          count, b = store time of the write that created the key, kept by
--          later writes; a key written before `b` existed gets it at its
--          next spend, and until then gives nothing back}
-- weighted() must stay operation-for-operation equal to the Rust version:
-- both round the same IEEE doubles in the same order.

-- The write of a spend. The expiry (`lives_us` from now) is two windows
-- after this one starts: the first write in this window set it already
-- (HSET keeps it), so later ones save a command.
local function sliding_window_write(key, index, prev, curr, born, first, lives_us, pad_ms)
  redis.call('HSET', key, 'i', int(index), 'p', int(prev), 'c', int(curr), 'b', int(born))
  if first then
    redis.call('PEXPIRE', key, ttl_ms(lives_us, pad_ms))
  end
end

local function sliding_window(key, now, limit, window, cost, burst, pad_ms, dry)
  local need = math.max(cost, 1)
  local index = idiv(now, window)
  local state = redis.call('HMGET', key, 'i', 'p', 'c', 'b')
  local stored = tonumber(state[1])
  local prev, curr = 0, 0
  if stored == index then
    prev, curr = tonumber(state[2]), tonumber(state[3])
  elseif stored ~= nil and stored + 1 == index then
    prev = tonumber(state[3])
  end
  -- A key without `b` gets it now, which only ever holds back a give-back.
  local born = tonumber(state[4]) or now

  local function weighted(p, c, elapsed)
    return p * (window - elapsed) / window + c
  end

  local before = weighted(prev, curr, now - index * window)
  local allowed = math.floor(before) + need <= limit
  -- The weight as the next check at this instant will compute it, rounded
  -- down as the decision rounds it: then `remaining` units are exactly
  -- what that check may take (limit - ceil(weight) said 0 with 9.6 of 10
  -- while one more still passed).
  local used = before
  if allowed then
    curr = curr + cost
    used = weighted(prev, curr, now - index * window)
  end
  local remaining = math.max(0, limit - math.floor(used))
  local commit = nil
  if allowed and cost > 0 then
    if dry then
      local p, c = prev, curr
      commit = function()
        sliding_window_write(key, index, p, c, born, stored ~= index, (index + 2) * window - now, pad_ms)
      end
    else
      sliding_window_write(key, index, prev, curr, born, stored ~= index, (index + 2) * window - now, pad_ms)
    end
  end

  local retry = 0
  if not allowed then
    -- The weighted count only falls with time, so binary-search the first
    -- microsecond that passes; two windows on it is zero and need <= limit.
    local function passes(t)
      local ti = idiv(t, window)
      local e = t - ti * window
      local w = 0
      if ti == index then
        w = weighted(prev, curr, e)
      elseif ti == index + 1 then
        w = weighted(curr, 0, e)
      end
      return math.floor(w) + need <= limit
    end
    local denied, ok = now, (index + 2) * window
    while ok - denied > 1 do
      local mid = denied + idiv(ok - denied, 2)
      if passes(mid) then
        ok = mid
      else
        denied = mid
      end
    end
    retry = ok - now
  end

  local reset = 0
  if curr > 0 then
    reset = (index + 2) * window - now
  elseif prev > 0 then
    reset = (index + 1) * window - now
  end
  return allowed and 1 or 0, remaining, retry, reset, commit
end

-- Refund (sliding_window.rs, refund): up to `cost` from the current
-- window's count first, then from the previous one's. Written only if
-- something was given back, and never rolled: a key last written in the
-- previous window keeps its index and only its count falls, so the expiry
-- that spend set ((i + 2) windows) stays right. Rolled to this window,
-- the key would say "this window" with an expiry a window short, and a
-- spend later in this window (which sets no expiry when the index
-- matches) would die a window early.
local function sliding_window_refund(key, now, limit, window, cost, burst, pad_ms)
  local index = idiv(now, window)
  local state = redis.call('HMGET', key, 'i', 'p', 'c')
  local stored = tonumber(state[1])
  local prev, curr = 0, 0
  if stored == index then
    prev, curr = tonumber(state[2]), tonumber(state[3])
  elseif stored ~= nil and stored + 1 == index then
    prev = tonumber(state[3])
  end
  local from_curr = math.min(cost, curr)
  local from_prev = math.min(cost - from_curr, prev)
  if from_curr + from_prev == 0 then
    return
  end
  if stored == index then
    redis.call('HSET', key, 'p', int(prev - from_prev), 'c', int(curr - from_curr))
  else
    -- stored + 1 == index: its current count is this window's previous.
    redis.call('HSET', key, 'c', int(prev - from_prev))
  end
end

-- Give-back (sliding_window.rs, give_back): up to `cost` of what a check at
-- store time `at` counted in its window `w`, not below 0, from the stored
-- count that still holds it: `c` while the stored index is `w`, `p` once a
-- spend in window w + 1 rolled it there; nothing once now is two windows
-- past `w` (those units weigh nothing), the key was rolled past it, or the
-- key was born (`b`) after `at`: a reset deletes the key, so one recreated
-- since holds none of that check's units. No `b` (an older write): nothing.
-- Never rolled, for the reason sliding_window_refund gives.
local function sliding_window_give_back(key, now, at, window, cost)
  local w = idiv(at, window)
  if idiv(now, window) >= w + 2 then
    return
  end
  local state = redis.call('HMGET', key, 'i', 'p', 'c', 'b')
  local stored = tonumber(state[1])
  local born = tonumber(state[4])
  local field, count
  if born == nil or born > at then
    return
  elseif stored == w then
    field, count = 'c', tonumber(state[3])
  elseif stored == w + 1 then
    field, count = 'p', tonumber(state[2])
  else
    return
  end
  local taken = math.min(cost, count)
  if taken > 0 then
    redis.call('HSET', key, field, int(count - taken))
  end
end
