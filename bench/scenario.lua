-- wrk script for bench/run.sh and bench/batch.sh: POST /v1/check (or
-- POST /v1/checks) over keep-alive.
-- Environment:
--   SCENARIO   spread | flood | zipf | batch
--   ALGORITHM  sliding_window | sliding_log | gcra | ...
--   SHAPE      spread only: one | two | policy (see body below); unset: the ALGORITHM rule
--   RATE_HINT  zipf only: the checks/s this target reaches on spread; the
--              per-key limit is chosen so that about 20% of checks are denied
--              at that rate.
--   BATCH      batch only: checks per request (default 100).
-- Scenarios:
--   spread  100k distinct keys, limits high enough that everything is allowed
--   flood   95% of checks on one key far over its limit, 5% spread
--   zipf    10k keys drawn from a Zipf(s = 1.0) distribution, ~20% denied
--   batch   spread's checks, BATCH of them per POST /v1/checks (consecutive
--           keys, so one batch never names a key twice); RESULT's
--           per_request says how many checks a request carried
local scenario = os.getenv("SCENARIO") or "spread"
local algorithm = os.getenv("ALGORITHM") or "sliding_window"
local SPREAD_KEYS = 100000
local ZIPF_KEYS = 10000
local WINDOW = "1s"

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

-- SHAPE (spread only): one | two | policy. `two` sends the inline two-limit
-- form, `policy` the same two limits as the policy `bench2` of run.sh's
-- policies file, `one` the single-rule form of its first limit.
local shape = os.getenv("SHAPE")

local function body(key, limit, window)
  if shape == "policy" then
    -- The same two limits, named in the policies file run.sh serves.
    return string.format('{"policy":"bench2","key":"%s"}', key)
  elseif shape == "two" then
    return string.format('{"key":"%s","limits":[{"name":"burst","algorithm":"gcra","limit":1000000,"window":"1s"},'
      .. '{"name":"daily","algorithm":"fixed_window","limit":1000000000,"window":"1d"}]}', key)
  elseif shape == "one" then
    return string.format('{"key":"%s","limit":1000000,"window":"1s","algorithm":"gcra"}', key)
  end
  return string.format('{"key":"%s","limit":%d,"window":"%s","algorithm":"%s"}', key, limit, window, algorithm)
end

-- Zipf: cumulative weights of ranks 1..N, sampled by binary search.
local cdf, zipf_limit = nil, nil
local function zipf_setup()
  cdf = {}
  local total = 0
  for i = 1, ZIPF_KEYS do
    total = total + 1 / i
    cdf[i] = total
  end
  for i = 1, ZIPF_KEYS do cdf[i] = cdf[i] / total end
  -- Per-key limit L (per 1 s window) so that sum(max(0, R p_i - L)) = 0.2 R.
  local rate = tonumber(os.getenv("RATE_HINT") or "10000")
  local function denied(limit)
    local d, prev = 0, 0
    for i = 1, ZIPF_KEYS do
      local p = cdf[i] - prev
      prev = cdf[i]
      d = d + math.max(0, rate * p - limit)
    end
    return d / rate
  end
  local lo, hi = 1, rate
  for _ = 1, 40 do
    local mid = (lo + hi) / 2
    if denied(mid) > 0.2 then lo = mid else hi = mid end
  end
  zipf_limit = math.max(1, math.floor(hi))
end

local function zipf_rank()
  local u = math.random()
  local lo, hi = 1, ZIPF_KEYS
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- Batch bodies, built once: SPREAD_KEYS / BATCH of them cover every key
-- once, so wrk spends no time per request building 100 checks.
local BATCH = tonumber(os.getenv("BATCH") or "100")
local batches = nil
local function batch_setup()
  batches = {}
  for b = 0, math.floor(SPREAD_KEYS / BATCH) - 1 do
    local items = {}
    for i = 1, BATCH do
      items[i] = body("s" .. (b * BATCH + i), 100000, "1m")
    end
    batches[b + 1] = '{"checks":[' .. table.concat(items, ",") .. ']}'
  end
end

init = function(args)
  math.randomseed(os.time() + (tonumber(tostring({}):match("0x(%x+)"), 16) or 0) % 1000)
  if scenario == "zipf" then zipf_setup() end
  if scenario == "batch" then batch_setup() end
end

local n = 0
request = function()
  n = n + 1
  local b
  if scenario == "batch" then
    return wrk.format(nil, "/v1/checks", nil, batches[n % #batches + 1])
  end
  if scenario == "flood" and math.random() < 0.95 then
    b = body("flood", 10, "1m")
  elseif scenario == "zipf" then
    b = body("z" .. zipf_rank(), zipf_limit, WINDOW)
  else
    b = body("s" .. (n % SPREAD_KEYS), 100000, "1m")
  end
  return wrk.format(nil, "/v1/check", nil, b)
end

done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout
  local per_request = scenario == "batch" and BATCH or 1
  io.write(string.format("RESULT requests=%d rps=%.0f p50_us=%d p99_us=%d p999_us=%d errors=%d per_request=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), errors, per_request))
end
