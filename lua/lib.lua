-- lib.lua: helpers shared by every script. src/store/scripts.rs builds each
-- script that Redis runs from this file, the algorithm functions and a
-- short entry point, so every check stays one self-contained EVALSHA:
--
-- One check (check.lua), of one or more limits, all or nothing:
--   KEYS[i]  limit i's state (its type depends on the algorithm)
--   ARGV[1]  now in microseconds since the epoch, or '' to use Redis TIME
--            (production passes ''; tests pass a controlled clock)
--   ARGV[2]  extra TTL in milliseconds added to every key (production: 0)
--   ARGV[3]  cost
--   ARGV[4 + 4 (i - 1) ..]  limit i: algorithm tag (fw, sw, sl2, tb, gcra),
--            limit, window in microseconds, burst (token_bucket and gcra;
--            the limit otherwise)
--   Reply    4 values per limit: allowed (1|0), remaining, retry_after_us,
--            reset_after_us
-- Several checks at once: see batch.lua. Reset and refund of one check's
-- limits (adjust.lua) take the same KEYS and ARGV (ARGV[3]: the refund's
-- cost) plus the invalidation channel and the client key last, and give
-- the same reply, that of a check of cost 0 afterwards, plus a flag (1: the
-- invalidation was published); each
-- algorithm file also defines `<name>_refund(key, now, limit, window, cost,
-- burst, pad_ms)`, which writes the refund and returns nothing.
--
-- Every algorithm is a function
--   name(key, now, limit, window, cost, burst, pad_ms, dry)
--     -> {allowed, remaining, retry_after_us, reset_after_us, commit}
-- With `dry` set it writes nothing (not even a sliding log's trim of
-- expired entries: a clock stepping back would see them again), answers
-- what it would have answered writing, and, when it allows a positive
-- cost, returns as `commit` a function making the writes it left out.

-- All numbers are integers below 2^53, where Lua's doubles are exact. Redis
-- converts Lua numbers to strings with '%.14g', which would round a
-- microsecond timestamp, so every number sent to Redis goes through int().

local function int(x)
  return string.format('%.0f', x)
end

-- Exact floor(a / b) for non-negative integers: the float quotient can round
-- up to the next integer, so correct it by one either way.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Key lifetime: until the state would be back to "never seen", in whole
-- milliseconds rounded up, plus the caller's padding.
local function ttl_ms(reset_us, pad_ms)
  return int(idiv(reset_us + 999, 1000) + pad_ms)
end
