-- wrk script for bench/hot_key.sh: every request checks one key of one
-- policy (POLICY, default "hot"), over keep-alive.
wrk.method = "POST"
wrk.path = "/v1/check"
wrk.headers["Content-Type"] = "application/json"
wrk.body = string.format('{"policy":"%s","key":"tenant-42"}', os.getenv("POLICY") or "hot")

done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.errors.status))
end
