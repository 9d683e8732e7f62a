-- gcra: the theoretical arrival time (TAT) of the next unit, one string per key
-- (src/domain/algorithms/gcra.rs).
-- key      string '<tat>:<interval>:<used>': the TAT in microseconds, the
--          emission interval it was written with and the whole units it
--          then held, so a changed limit keeps the units used. A plain
--          '<tat>' (written before the interval was kept) reads as written with
--          the current interval.

-- Most units a lowered limit may owe: the burst plus the longest window
-- (366 days, MAX_WINDOW_US) of refill, keeping every number below 2^53.
local function gcra_max_used(burst, interval)
  return burst + idiv(366 * 86400 * 1000000, interval)
end

-- The TAT at `interval`, at least `now`, and whether it was written at
-- another interval: then it is rebuilt from the units it held, from the
-- instant they were counted.
local function gcra_tat(raw, now, interval, burst)
  if not raw then
    return now, false
  end
  local at, was, used = string.match(raw, '^(%d+):(%d+):(%d+)$')
  local converted = false
  if at then
    at, was, used = tonumber(at), tonumber(was), tonumber(used)
    if was ~= interval then
      at = at - used * was + math.min(used, gcra_max_used(burst, interval)) * interval
      converted = true
    end
  else
    at = tonumber(raw) or now
  end
  return math.max(at, now), converted
end

-- The write of a TAT `reset` ahead of now, with the units it holds.
local function gcra_write(key, tat, interval, reset, pad_ms)
  local used = idiv(reset + interval - 1, interval)
  local value = int(tat) .. ':' .. int(interval) .. ':' .. int(used)
  redis.call('SET', key, value, 'PX', ttl_ms(reset, pad_ms))
end

local function gcra(key, now, limit, window, cost, burst, pad_ms, dry)
  local need = math.max(cost, 1)
  local interval = idiv(window, limit)
  local tolerance = burst * interval
  local tat, converted = gcra_tat(redis.call('GET', key), now, interval, burst)

  local allowed = tat + need * interval - now <= tolerance
  local tat_after = tat
  if allowed then
    tat_after = tat + cost * interval
  end
  local reset = tat_after - now
  if converted and tat > now then
    -- Written at another rate, the key's TTL is the writer's time to refill:
    -- a slower rule needs it longer. Only ever lengthened, so even a dry
    -- look may do it: no answer changes, the usage just does not expire.
    redis.call('PEXPIRE', key, ttl_ms(tat - now, pad_ms), 'GT')
  end
  local commit = nil
  if allowed and cost > 0 then
    if dry then
      commit = function()
        gcra_write(key, tat_after, interval, reset, pad_ms)
      end
    else
      gcra_write(key, tat_after, interval, reset, pad_ms)
    end
  end
  local retry = 0
  if not allowed then
    retry = tat + need * interval - tolerance - now
  end
  return allowed and 1 or 0, idiv(math.max(0, tolerance - reset), interval), retry, reset, commit
end

-- Refund (gcra.rs, refund): the TAT back by `cost` intervals, not before
-- now. A TAT back at now holds nothing, so the key goes (kept, it would
-- count as used if the clock then stepped back).
local function gcra_refund(key, now, limit, window, cost, burst, pad_ms)
  local raw = redis.call('GET', key)
  if not raw then
    return
  end
  local interval = idiv(window, limit)
  local tat = gcra_tat(raw, now, interval, burst)
  local back = math.max(now, tat - cost * interval)
  if back > now then
    gcra_write(key, back, interval, back - now, pad_ms)
  else
    redis.call('DEL', key)
  end
end
