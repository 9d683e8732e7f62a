-- concurrency: at most `limit` leases live at once
-- (src/domain/algorithms/concurrency.rs). `window` is the lease's TTL.
-- key      sorted set: member = lease id, score = its expiry in µs. A lease
--          whose expiry has passed counts for nothing; a spend trims them,
--          so the set holds at most `limit` live leases plus the expired
--          ones since the last spend. The key lives until the latest expiry.
-- `lease`  the id a check acquires (the operation's, `''` for none).

local function concurrency(key, now, limit, window, cost, burst, pad_ms, dry, lease)
  lease = lease or ''
  local held = redis.call('ZCOUNT', key, '(' .. int(now), '+inf')
  local latest = nil
  if held > 0 then
    latest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  -- One slot per request in flight, whatever its cost (concurrency.rs).
  local allowed = held < limit
  local spends = allowed and cost > 0
  local expires = now + window
  local retry = 0
  if not allowed and held > 0 then
    local first = redis.call('ZRANGEBYSCORE', key, '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    retry = tonumber(first[2]) - now
  end
  local commit = nil
  local count = held
  if spends then
    count = held + 1
    if latest == nil or expires > latest then
      latest = expires
    end
    local last = latest
    commit = function()
      redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
      redis.call('ZADD', key, int(expires), lease)
      redis.call('PEXPIRE', key, ttl_ms(last - now, pad_ms))
    end
    if not dry then
      commit()
    end
  end
  local reset = 0
  if latest ~= nil then
    reset = latest - now
  end
  -- max(0, ...): the limit may have been lowered while leases were held.
  return allowed and 1 or 0, math.max(0, limit - count), retry, reset, commit
end

-- A refund moves no lease: only a release frees one (concurrency.rs).
local function concurrency_refund(key, now, limit, window, cost, burst, pad_ms)
end

-- Frees `lease` at once (concurrency.rs, release): whether it was live.
local function concurrency_release(key, now, lease)
  local score = tonumber(redis.call('ZSCORE', key, lease))
  if score == nil then
    return false
  end
  redis.call('ZREM', key, lease)
  return score > now
end

-- Extends the live `lease` to now + window (concurrency.rs, renew), and
-- the key to its latest expiry: whether it was live.
local function concurrency_renew(key, now, window, lease, pad_ms)
  local score = tonumber(redis.call('ZSCORE', key, lease))
  if score == nil or score <= now then
    return false
  end
  redis.call('ZADD', key, int(now + window), lease)
  local last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIRE', key, ttl_ms(last - now, pad_ms))
  return true
end
