-- wrk script for bench/run.sh's forward-auth rows: GET / through nginx
-- over keep-alive, keyed like the spread scenario of scenario.lua: each
-- request carries `X-API-Key: s<n % 100000>` (the default key_from reads
-- it; the direct route ignores it). Prints the RESULT line run.sh reads.
-- TARGET_PATH: the path asked (default /; /v1/auth/api for ratekeeper alone).
local SPREAD_KEYS = 100000
local path = os.getenv("TARGET_PATH") or "/"

init = function(args)
  math.randomseed(os.time() + (tonumber(tostring({}):match("0x(%x+)"), 16) or 0) % 1000)
end

local n = math.random(SPREAD_KEYS)
request = function()
  n = n + 1
  return wrk.format("GET", path, { ["X-API-Key"] = "s" .. (n % SPREAD_KEYS) }, nil)
end

done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read
    + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT requests=%d rps=%.0f p50_us=%d p99_us=%d p999_us=%d errors=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), errors))
end
