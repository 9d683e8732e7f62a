-- wrk script: POST /v1/check over keep-alive, cycling through 100k keys with a
-- limit high enough that every check is allowed (the pure store path).
-- ALGORITHM comes from the environment (default sliding_window).
local algorithm = os.getenv("ALGORITHM") or "sliding_window"
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  n = (n + 1) % 100000
  local body = string.format(
    '{"key":"bench:%d","limit":1000000,"window":"1m","algorithm":"%s"}', n, algorithm)
  return wrk.format(nil, "/v1/check", nil, body)
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT p50_us=%d p99_us=%d p999_us=%d rps=%.0f errors=%d\n",
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    summary.requests / (summary.duration / 1e6),
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
