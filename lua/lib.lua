-- lib.lua: helpers shared by every part of the one script Redis runs.
-- src/store/scripts.rs builds it from a generated prelude (the calling
-- convention's numbers, src/store/redis/wire.rs), this file, the algorithm
-- functions, generated tables from algorithm tag to function, check.lua
-- (one check's limits, all or nothing), adjust.lua (reset, refund, settle,
-- release, renewal, give-back) and ops.lua, the entry point that applies a
-- list of operations, so every call stays one self-contained EVALSHA. wire.rs documents KEYS, ARGV and
-- the reply.
--
-- Each algorithm file also defines `<name>_refund(key, now, limit, window,
-- cost, burst, pad_ms)`, which writes the refund and returns nothing; the
-- two windows also `<name>_give_back(key, now, at, window, cost)`, which
-- gives back what a check at store time `at` counted (adjust.lua,
-- give_back_all) and returns nothing.
--
-- Every algorithm is a function
--   name(key, now, limit, window, cost, burst, pad_ms, dry)
--     -> allowed, remaining, retry_after_us, reset_after_us, commit
-- (five values, not a table: a table per limit per check is garbage the
-- collector then walks). With `dry` set it writes nothing (not even a
-- sliding log's trim of expired entries: a clock stepping back would see
-- them again), answers what it would have answered writing, and, when it
-- allows a positive cost, returns as `commit` a function making the writes
-- it left out. Without `dry` it makes no such function: each algorithm's
-- writes are a function of their own (`<name>_write`), called directly.

-- All numbers are integers below 2^53, where Lua's doubles are exact. Redis
-- converts Lua numbers to strings with '%.14g', which would round a
-- microsecond timestamp, so every number sent to Redis goes through int().

local function int(x)
  -- Below 1e14 '%.14g' is exact, and Redis and `..` print a number so:
  -- the common small numbers skip string.format, the costliest step of a
  -- check after the redis.calls themselves.
  if x % 1 == 0 and x < 1e14 and x > -1e14 then
    return x
  end
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

-- A limit's window argument: a length in microseconds, or a calendar
-- window's boundaries 'b0,b1,b2,b3' (src/store/redis/wire.rs,
-- push_limits), which only fixed_window receives.
local function window_arg(arg)
  local length = tonumber(arg)
  if length then
    return length
  end
  local bounds = {}
  for b in string.gmatch(arg, '%d+') do
    bounds[#bounds + 1] = tonumber(b)
  end
  return bounds
end

-- The period holding `now` (src/domain/window.rs, Window::period): an
-- identifier and the microseconds until it ends. For a length the
-- identifier is the period's number since the epoch; for a calendar
-- window, its start, picked by this clock (Redis's, as for every
-- decision) among the three periods the instance sent around its own.
local function period(now, window)
  if type(window) == 'number' then
    local index = idiv(now, window)
    return index, (index + 1) * window - now
  end
  for i = 1, #window - 1 do
    if window[i] <= now and now < window[i + 1] then
      return window[i], window[i + 1] - now
    end
  end
  -- Level 0: the message alone, its code first (src/store/redis/errors.rs).
  error('CLOCKSKEW calendar window: Redis\'s clock (' .. int(now) ..
    ') is outside the periods the instance sent: their clocks are a period or more apart', 0)
end
