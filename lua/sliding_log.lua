-- sliding_log: one entry per admission instant carrying its units, bounded
-- (src/domain/algorithms/sliding_log.rs explains the bound and its error).
-- key      sorted set: member '<time_us>:<units>' scored time_us, timestamps
--          distinct; plus 'n:<units>' scored +inf, the running total, which
--          trimming by time never touches.
-- At most 2 * MAX_EXACT_ENTRIES + 1 entries, so every step is bounded
-- whatever the limit or cost, and the key stays a listpack. An allowed check
-- reads only the newest entry, the total and the entries leaving the
-- window; only a denial scans the log, for its exact retry_after.

local MAX_EXACT_ENTRIES = 63

-- '<a>:<b>' -> a, b as numbers (a is nil for the total's 'n').
local function split(member)
  local colon = string.find(member, ':', 1, true)
  return tonumber(string.sub(member, 1, colon - 1)), tonumber(string.sub(member, colon + 1))
end

local function entry(ts, units)
  return int(ts) .. ':' .. int(units)
end

local function sliding_log(key, now, limit, window, cost, burst, pad_ms, dry)
  local need = math.max(cost, 1)
  -- The newest entry and the total: the last two members.
  local tail = redis.call('ZRANGE', key, -2, -1)
  local total, count, len, newest, newest_units = nil, 0, 0, nil, 0
  if #tail > 0 then
    total = tail[#tail]
    local _, n = split(total)
    count = n
    len = redis.call('ZCARD', key) - 1
  end
  if #tail == 2 then
    newest, newest_units = split(tail[1])
  end
  local changed = false
  -- Entries at or before `cutoff` have left the window. A dry pass counts
  -- them out without removing them: after a denied check of several
  -- limits the log must be as it was, because a clock stepping back would
  -- see them again (apply_all decides on a copy and keeps the original).
  local cutoff = nil
  if len > 0 and now - window >= 0 then
    cutoff = now - window
    local expired = redis.call('ZRANGEBYSCORE', key, '-inf', int(cutoff))
    if #expired > 0 then
      for _, member in ipairs(expired) do
        local _, n = split(member)
        count = count - n
      end
      if not dry then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cutoff))
        changed = true
      end
      len = len - #expired
      if len == 0 then
        newest = nil
      end
    end
  end

  local allowed = count + need <= limit
  local spends = allowed and cost > 0
  if spends and not dry then
    -- Which entry takes the units: one at this very instant; else a new one
    -- while the log is short; else the newest, if this instant falls in its
    -- slot or before it; else a new one.
    local same = {}
    if len > 0 then
      same = redis.call('ZRANGEBYSCORE', key, int(now), int(now))
    end
    if #same > 0 then
      local _, n = split(same[1])
      redis.call('ZREM', key, same[1])
      redis.call('ZADD', key, int(now), entry(now, n + cost))
      if now == newest then
        newest_units = n + cost
      end
    else
      local slot = idiv(window + MAX_EXACT_ENTRIES - 1, MAX_EXACT_ENTRIES)
      if len >= MAX_EXACT_ENTRIES and (now < newest or idiv(now, slot) == idiv(newest, slot)) then
        redis.call('ZREM', key, entry(newest, newest_units))
        newest, newest_units = math.max(newest, now), newest_units + cost
        redis.call('ZADD', key, int(newest), entry(newest, newest_units))
      else
        redis.call('ZADD', key, int(now), entry(now, cost))
        len = len + 1
        if newest == nil or now > newest then
          newest, newest_units = now, cost
        end
      end
    end
    count = count + cost
    changed = true
  end
  if changed then
    if total ~= nil then
      redis.call('ZREM', key, total)
    end
    if len > 0 then
      redis.call('ZADD', key, '+inf', 'n:' .. int(count))
    end
  end
  if spends and dry then
    -- What the write above would leave, without writing: the units
    -- counted, and the newest entry at this instant or later (every branch
    -- of the write leaves it at max(newest, now)).
    count = count + cost
    if newest == nil or now > newest then
      newest = now
    end
  end

  local retry = 0
  if not allowed then
    -- Passes once the oldest (count + need - limit) units have left the
    -- window: when the entry holding that rank expires.
    local rank = count + need - limit
    local seen = 0
    for _, member in ipairs(redis.call('ZRANGE', key, 0, -2)) do
      local ts, n = split(member)
      -- Expired entries are still here after a dry pass.
      if cutoff == nil or ts > cutoff then
        seen = seen + n
        if seen >= rank then
          retry = ts + window - now
          break
        end
      end
    end
  end
  local reset = 0
  if newest ~= nil then
    reset = newest + window - now
    if spends and not dry then
      redis.call('PEXPIRE', key, ttl_ms(reset, pad_ms))
    end
  end
  -- The write of a dry pass that spends: the same call writing (its
  -- entry bookkeeping is too intricate to capture; the state is as the dry
  -- pass found it, so it decides the same).
  local commit = nil
  if spends and dry then
    commit = function()
      sliding_log(key, now, limit, window, cost, burst, pad_ms, false)
    end
  end
  -- max(0, ...): the limit may have been lowered since these were logged.
  return allowed and 1 or 0, math.max(0, limit - count), retry, reset, commit
end

-- Refund (sliding_log.rs, refund): removes the `cost` newest units still in
-- the window, from the newest entry back, splitting the last one touched,
-- and keeps the running total right. Expired entries stay for the next
-- check to trim. One read of the whole log: O(entries), at most 127.
local function sliding_log_refund(key, now, limit, window, cost, burst, pad_ms)
  local members = redis.call('ZRANGE', key, 0, -1)
  if #members < 2 then
    return
  end
  local total = members[#members]
  local _, count = split(total)
  local len = #members - 1
  local left = cost
  local i = len
  while left > 0 and i >= 1 do
    local ts, n = split(members[i])
    if now - window >= 0 and ts <= now - window then
      break
    end
    local taken = math.min(left, n)
    redis.call('ZREM', key, members[i])
    if n > taken then
      redis.call('ZADD', key, int(ts), entry(ts, n - taken))
    else
      len = len - 1
    end
    left, count = left - taken, count - taken
    i = i - 1
  end
  if left == cost then
    return
  end
  -- Without entries the total goes too, and with it the key.
  redis.call('ZREM', key, total)
  if len > 0 then
    redis.call('ZADD', key, '+inf', 'n:' .. int(count))
  end
end
