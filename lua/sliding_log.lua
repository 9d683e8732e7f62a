-- sliding_log: one entry per admission instant carrying its units, bounded
-- (src/domain/algorithms/sliding_log.rs explains the bound and its error).
-- key      sorted set; member '<time_us>:<units>', score time_us; timestamps distinct
-- At most 2 * MAX_EXACT_ENTRIES + 1 members, so every step below is bounded
-- whatever the limit or cost, and the key stays a listpack.

local MAX_EXACT_ENTRIES = 63

local function sliding_log(key, now, limit, window, cost, burst, pad_ms)
  local need = math.max(cost, 1)
  if now - window >= 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - window))
  end
  -- The whole log, oldest first: ts[i], units[i].
  local ts, units, count = {}, {}, 0
  for i, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    local t, n = string.match(member, '^(%d+):(%d+)$')
    ts[i], units[i] = tonumber(t), tonumber(n)
    count = count + units[i]
  end
  local len = #ts

  local allowed = count + need <= limit
  if allowed and cost > 0 then
    -- Which entry takes the units: one at this very instant; else a new one
    -- while the log is short; else the newest, if this instant falls in its
    -- slot or before it; else a new one.
    local into = nil
    for i = len, 1, -1 do
      if ts[i] == now then
        into = i
        break
      elseif ts[i] < now then
        break
      end
    end
    if into == nil and len >= MAX_EXACT_ENTRIES then
      local slot = idiv(window + MAX_EXACT_ENTRIES - 1, MAX_EXACT_ENTRIES)
      if now < ts[len] or idiv(now, slot) == idiv(ts[len], slot) then
        into = len
      end
    end
    if into == nil then
      redis.call('ZADD', key, int(now), int(now) .. ':' .. int(cost))
      -- Keep the Lua view sorted like the set: insert before later entries.
      local at = len + 1
      while at > 1 and ts[at - 1] > now do
        at = at - 1
      end
      table.insert(ts, at, now)
      table.insert(units, at, cost)
      len = len + 1
    else
      redis.call('ZREM', key, int(ts[into]) .. ':' .. int(units[into]))
      ts[into] = math.max(ts[into], now)
      units[into] = units[into] + cost
      redis.call('ZADD', key, int(ts[into]), int(ts[into]) .. ':' .. int(units[into]))
    end
    count = count + cost
  end

  local retry = 0
  if not allowed then
    -- Passes once the oldest (count + need - limit) units have left the window.
    local rank = count + need - limit
    local seen = 0
    for i = 1, len do
      seen = seen + units[i]
      if seen >= rank then
        retry = ts[i] + window - now
        break
      end
    end
  end
  local reset = 0
  if len > 0 then
    reset = ts[len] + window - now
    if allowed and cost > 0 then
      redis.call('PEXPIRE', key, ttl_ms(reset, pad_ms))
    end
  end
  -- max(0, ...): the limit may have been lowered since these were logged.
  return {allowed and 1 or 0, math.max(0, limit - count), retry, reset}
end
