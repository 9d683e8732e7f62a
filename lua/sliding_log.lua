-- sliding_log: one sorted-set member per admitted unit, scored by its time
-- (src/domain/algorithms/sliding_log.rs).
-- key      sorted set; member '<time_us>:<n>', score time_us
-- Members of one timestamp are numbered from how many that timestamp already
-- has. Trimming removes whole timestamps, so the numbers never collide.

local function sliding_log(key, now, limit, window, cost, burst, pad_ms)
  local need = math.max(cost, 1)
  if now - window >= 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - window))
  end
  local count = redis.call('ZCARD', key)

  local allowed = count + need <= limit
  if allowed and cost > 0 then
    local at = int(now)
    local first = redis.call('ZCOUNT', key, at, at)
    local args = {}
    for n = first, first + cost - 1 do
      args[#args + 1] = at
      args[#args + 1] = at .. ':' .. int(n)
      -- unpack() has a stack limit; add large costs in slices.
      if #args >= 1000 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', key, unpack(args))
    end
    count = count + cost
  end

  local retry = 0
  if not allowed then
    -- Passes once the oldest (count + need - limit) units have left the window.
    local rank = count + need - limit
    local entry = redis.call('ZRANGE', key, rank - 1, rank - 1, 'WITHSCORES')
    retry = tonumber(entry[2]) + window - now
  end
  local reset = 0
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] then
    reset = tonumber(newest[2]) + window - now
    if allowed and cost > 0 then
      redis.call('PEXPIRE', key, ttl_ms(reset, pad_ms))
    end
  end
  -- max(0, ...): the limit may have been lowered since these were logged.
  return {allowed and 1 or 0, math.max(0, limit - count), retry, reset}
end
