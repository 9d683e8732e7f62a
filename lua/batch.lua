-- batch: several checks in one call, applied in order, each exactly as it
-- would run alone (src/store/redis/batch.rs sends them). check.lua and the
-- algorithm functions are defined before this file.
-- KEYS     the limits' keys, check after check
-- ARGV[1]  now in microseconds, or '' to use Redis TIME (one reading for the
--          whole batch: the checks arrived together)
-- ARGV[2]  extra TTL in milliseconds
-- then, per check: the number of limits n, the cost, and n times (algorithm
--          tag, limit, window in microseconds, burst)
-- Reply    4 values per limit, check after check, flattened: allowed,
--          remaining, retry_after_us, reset_after_us; or, for every limit of
--          a check that raised an error (a key of the wrong type, or Redis
--          refusing the write: OOM, READONLY, an ACL), -1, the error message,
--          0, 0. The message keeps Redis's code first, so the store
--          classifies it as it would a direct call's.
-- Each check runs under pcall, so one bad key fails only its own check: the
-- checks before it keep their writes (Redis cannot roll them back) and the
-- ones after it still run. Within a check the spending writes all come
-- after every read, so a refused write or a key of the wrong type leaves
-- none of its limits spent. (A check of one limit drops a sliding log's
-- expired entries while it reads, as the Rust function does; a check of
-- several writes nothing at all unless every limit allows.)

local now = clock(ARGV[1])
local pad_ms = tonumber(ARGV[2])
local reply = {}
local k, a = 0, 2
while a < #ARGV do
  local n, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local ok, result = pcall(check_all, k, a + 2, n, now, cost, pad_ms, {})
  if not ok then
    -- redis.call raises a table {err = ...}; Lua itself raises strings.
    local message = result
    if type(message) == 'table' and message.err then
      message = message.err
    end
    message = tostring(message)
    result = {}
    for i = 1, n do
      result[4 * i - 3], result[4 * i - 2], result[4 * i - 1], result[4 * i] = -1, message, 0, 0
    end
  end
  for j = 1, #result do
    reply[#reply + 1] = result[j]
  end
  k, a = k + n, a + 2 + 4 * n
end
return reply
