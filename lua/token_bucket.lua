-- token_bucket: `burst` tokens, one more every window / limit microseconds
-- (src/domain/algorithms/token_bucket.rs).
-- key      hash {u = tokens used (missing from a full bucket), a = time up
--          to which tokens were credited, i = the interval it was written
--          with}. Used, not left, so a changed burst keeps the usage (see
--          the Rust module doc); the interval, so that a rule refilling
--          slower than the writer keeps the key alive while it needs it.
--          The previous version kept t = tokens left instead of u: a bucket
--          with t reads as used = burst - t, and the next spending write
--          moves it to u. This version deletes t whenever it writes, so a t
--          beside a u was written later, by an instance of the previous
--          version during a rolling upgrade, and wins.
-- Only a check that consumes writes: refilling is a pure function of time,
-- so the stored state and the refilled one give the same future answers.

-- The write of a spend: `used` tokens at `credited` refilling every
-- `interval`, dropping a previous version's `t` (see above).
local function token_bucket_write(key, used, credited, interval, drop_left, reset, pad_ms)
  redis.call('HSET', key, 'u', int(used), 'a', int(credited), 'i', int(interval))
  if drop_left then
    redis.call('HDEL', key, 't')
  end
  redis.call('PEXPIRE', key, ttl_ms(reset, pad_ms))
end

local function token_bucket(key, now, limit, window, cost, burst, pad_ms, dry)
  local need = math.max(cost, 1)
  local interval = idiv(window, limit)
  local state = redis.call('HMGET', key, 'u', 'a', 't', 'i')
  local used, credited, left = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
  local was = tonumber(state[4]) or interval
  if left ~= nil then
    used = math.max(0, burst - left)
  end
  if used == nil or credited == nil then
    used, credited = 0, now
  end
  -- At most the burst plus the longest window (366 days) of refill owed, as
  -- in gcra.lua, so a limit lowered far below its usage stays below 2^53.
  used = math.min(used, burst + idiv(366 * 86400 * 1000000, interval))
  -- Negative after the burst was lowered below what was used: a debt.
  local tokens = burst - used
  if now > credited then
    local earned = idiv(now - credited, interval)
    tokens = tokens + earned
    credited = credited + earned * interval
    if tokens >= burst then
      tokens, credited = burst, now
    end
  end

  local allowed = tokens >= need
  if allowed then
    tokens = tokens - cost
  end
  local retry = 0
  if not allowed then
    retry = credited + (need - tokens) * interval - now
  end
  local reset = 0
  if tokens < burst then
    reset = credited + (burst - tokens) * interval - now
  end
  if was ~= interval and reset > 0 then
    -- Written at another rate, the key's TTL is the writer's time to refill:
    -- a slower rule needs it longer. Only ever lengthened, so even a dry
    -- look may do it: no answer changes, the usage just does not expire.
    redis.call('PEXPIRE', key, ttl_ms(reset, pad_ms), 'GT')
  end
  local commit = nil
  if allowed and cost > 0 then
    if dry then
      commit = function()
        token_bucket_write(key, burst - tokens, credited, interval, left ~= nil, reset, pad_ms)
      end
    else
      token_bucket_write(key, burst - tokens, credited, interval, left ~= nil, reset, pad_ms)
    end
  end
  return allowed and 1 or 0, math.max(0, tokens), retry, reset, commit
end

-- Refund (token_bucket.rs, refund): up to `cost` tokens back, up to `burst`
-- (a debt is paid down first), after the same refill as a check. A full
-- bucket restarts its clock now, as a refill that fills it does. The
-- expiry is lengthened to the time until full if need be, never shortened.
local function token_bucket_refund(key, now, limit, window, cost, burst, pad_ms)
  local interval = idiv(window, limit)
  local state = redis.call('HMGET', key, 'u', 'a', 't')
  local used, credited, left = tonumber(state[1]), tonumber(state[2]), tonumber(state[3])
  if left ~= nil then
    used = math.max(0, burst - left)
  end
  if used == nil or credited == nil then
    return
  end
  used = math.min(used, burst + idiv(366 * 86400 * 1000000, interval))
  local tokens = burst - used
  if now > credited then
    local earned = idiv(now - credited, interval)
    tokens = tokens + earned
    credited = credited + earned * interval
    if tokens >= burst then
      tokens, credited = burst, now
    end
  end
  tokens = math.min(burst, tokens + cost)
  if tokens == burst then
    credited = now
  end
  redis.call('HSET', key, 'u', int(burst - tokens), 'a', int(credited), 'i', int(interval))
  if left ~= nil then
    redis.call('HDEL', key, 't')
  end
  -- GT: only ever lengthened. On an inline key shared with a rule that
  -- refills slower, the refunding rule's time to refill may be shorter
  -- than the slower rule still needs; a refund must not end that usage.
  redis.call('PEXPIRE', key, ttl_ms(credited + (burst - tokens) * interval - now, pad_ms), 'GT')
end

-- A key of the previous version (t = tokens left, see the header) rewritten
-- as this version's (u = tokens used), exactly as a read with this `burst`
-- judges it. A settle's spend reads the key with a raised burst
-- (spend_all in adjust.lua), which would take t as far more tokens used,
-- so it calls this first with the rule's own burst.
local function token_bucket_upgrade(key, burst)
  local left = tonumber(redis.call('HGET', key, 't'))
  if left ~= nil then
    redis.call('HSET', key, 'u', int(math.max(0, burst - left)))
    redis.call('HDEL', key, 't')
  end
end
