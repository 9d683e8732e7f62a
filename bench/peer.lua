-- wrk script for bench/peers.sh: the same scenarios in ratekeeper's and in
-- Kuadrant/limitador's HTTP API, so both servers get identical traffic.
-- Environment:
--   API       ratekeeper (POST /v1/check {"policy","key"}) or limitador
--             (POST /check_and_report {"namespace","values":{"key"},"delta":1})
--   SCENARIO  spread: 100k keys, limit 1e6/s (all allowed)
--             flood: 95% of checks on one key over its limit of 100/s, 5% spread
-- A denial is 200 with allowed false from ratekeeper, 429 from limitador:
-- both count as answers; any other status is an error.
local api = os.getenv("API") or "ratekeeper"
local scenario = os.getenv("SCENARIO") or "spread"
local KEYS = 100000

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.path = api == "limitador" and "/check_and_report" or "/v1/check"

local function body(name, key)
  if api == "limitador" then
    return string.format('{"namespace":"%s","values":{"key":"%s"},"delta":1}', name, key)
  end
  return string.format('{"policy":"%s","key":"%s"}', name, key)
end

request = function()
  if scenario == "flood" and math.random() < 0.95 then
    return wrk.format(nil, nil, nil, body("flood", "hot"))
  end
  return wrk.format(nil, nil, nil, body(scenario, "k" .. math.random(KEYS)))
end

-- Statuses other than 200 and 429, counted per thread (wrk's own count
-- takes 429 as an error) and summed in done().
local threads = {}
setup = function(thread) table.insert(threads, thread) end
-- Denials counted the same way, so that a target that counts nothing shows.
bad = 0
denied = 0
response = function(status, headers, body)
  if status == 429 then
    denied = denied + 1
  elseif status ~= 200 then
    bad = bad + 1
  elseif string.find(body, '"allowed":false', 1, true) then
    denied = denied + 1
  end
end

done = function(summary, latency, requests)
  local n = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  local d = 0
  for _, thread in ipairs(threads) do
    n = n + thread:get("bad")
    d = d + thread:get("denied")
  end
  io.write(string.format("RESULT rps=%.0f p50_us=%d p99_us=%d requests=%d denied=%d bad=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.requests, d, n))
end
