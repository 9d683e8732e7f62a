-- fixed_window: one counter per period, epoch-aligned windows of a length
-- or calendar periods (src/domain/algorithms/fixed_window.rs).
-- key      hash {i = the period's identifier (`period` in lib.lua), c = units
--          admitted in that period, b = store time the write that started
--          these contents ran (a missing key or a new period); a key written
--          before `b` existed gets it at its next spend, and until then
--          gives nothing back}
-- The window index lives in the hash rather than in the key name so the
-- script touches only the key it was given (a requirement in Redis Cluster).

-- The write of a spend: `count` units in period `index`. The expiry is the
-- window's end: the first write in this window set it already (HSET keeps
-- it), so later ones save a command.
local function fixed_window_write(key, index, count, born, same_window, until_next, pad_ms)
  redis.call('HSET', key, 'i', int(index), 'c', int(count), 'b', int(born))
  if not same_window then
    redis.call('PEXPIRE', key, ttl_ms(until_next, pad_ms))
  end
end

local function fixed_window(key, now, limit, window, cost, burst, pad_ms, dry)
  local need = math.max(cost, 1)
  local index, until_next = period(now, window)
  local state = redis.call('HMGET', key, 'i', 'c', 'b')
  local count = 0
  local same_window = tonumber(state[1]) == index
  -- A new period starts the contents afresh; a key without `b` gets it now,
  -- which only ever holds back a give-back.
  local born = now
  if same_window then
    count = tonumber(state[2])
    born = tonumber(state[3]) or now
  end

  local allowed = count + need <= limit
  local commit = nil
  if allowed and cost > 0 then
    count = count + cost
    if dry then
      commit = function()
        fixed_window_write(key, index, count, born, same_window, until_next, pad_ms)
      end
    else
      fixed_window_write(key, index, count, born, same_window, until_next, pad_ms)
    end
  end

  local retry = 0
  if not allowed then
    retry = until_next
  end
  local reset = 0
  if count > 0 then
    reset = until_next
  end
  -- max(0, ...): the limit may have been lowered since the count was made.
  return allowed and 1 or 0, math.max(0, limit - count), retry, reset, commit
end

-- The count `count` of `key` down by up to `cost`, not below 0: what a
-- refund and a give-back write once each has found what it may take from.
local function fixed_window_lower(key, count, cost)
  local taken = math.min(cost, count)
  if taken > 0 then
    redis.call('HSET', key, 'c', int(count - taken))
  end
end

-- Refund (fixed_window.rs, refund): the current window's count down by up
-- to `cost`, not below 0. The window's end stays the key's expiry.
local function fixed_window_refund(key, now, limit, window, cost, burst, pad_ms)
  local state = redis.call('HMGET', key, 'i', 'c')
  if tonumber(state[1]) ~= (period(now, window)) then
    return
  end
  fixed_window_lower(key, tonumber(state[2]), cost)
end

-- Give-back (fixed_window.rs, give_back): up to `cost` of what a check at
-- store time `at` counted, not below 0, only while the stored count is of
-- that check's period, that period is now's and the key was born (`b`) no
-- later than `at`; otherwise its count is gone with its period or a reset
-- (which deletes the key, so a key recreated since is born after `at`),
-- and nothing else may be taken instead. No `b` (an older write): nothing. `at` is in
-- now's period iff it lies within its bounds: asked of `period` itself, a
-- calendar `at` before the boundaries the instance sent (an old check)
-- would raise CLOCKSKEW. The window's end stays the key's expiry.
local function fixed_window_give_back(key, now, at, window, cost)
  local index, until_next = period(now, window)
  local start = index
  if type(window) == 'number' then
    start = index * window
  end
  if at < start or at >= now + until_next then
    return
  end
  local state = redis.call('HMGET', key, 'i', 'c', 'b')
  local born = tonumber(state[3])
  if tonumber(state[1]) ~= index or born == nil or born > at then
    return
  end
  fixed_window_lower(key, tonumber(state[2]), cost)
end
