#!/usr/bin/env bash
# What a calendar window costs a check against a fixed window of the same
# length, counted where a noisy 2-core machine does not disturb the count:
#
#   bash bench/calendar_cost.sh [BINARY]      (default target/release/ratekeeper)
#
# For each store (embedded; Redis) and each rule, one client sends N checks
# of distinct keys over one keep-alive connection to BINARY running under
# valgrind's callgrind:
#   fixed     {"limit": 1000000, "window": "1d", "algorithm": "fixed_window"}
#   calendar  {"limit": 1000000, "calendar": "day", "timezone": "Europe/Berlin"}
# and reports ratekeeper's instructions per check (startup included, the
# same for both) and, on Redis, the script's own time per call from Redis's
# commandstats (usec_per_call of EVALSHA: Redis's clock, not valgrind's).
# Writes bench/results/calendar_cost-<UTC time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/ratekeeper}
N=${N:-5000}
for tool in valgrind callgrind_annotate python3 redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install valgrind python3 redis-server)" >&2; exit 1; }
done
TMP=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
REDIS_PID=$!
trap 'kill $REDIS_PID 2>/dev/null || true; pkill -INT -f "ratekeeper-calendar-cost" 2>/dev/null || true; rm -rf "$TMP"' EXIT
PORT=$(free_port)

cat > "$TMP/drive.py" <<'PY'
import http.client, json, sys
port, n, rule = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rules = {
    "fixed": {"limit": 1000000, "window": "1d", "algorithm": "fixed_window"},
    "calendar": {"limit": 1000000, "calendar": "day", "timezone": "Europe/Berlin"},
}
c = http.client.HTTPConnection("127.0.0.1", port)
for i in range(n):
    body = json.dumps({"key": f"{rule}:{i}", **rules[rule]})
    c.request("POST", "/v1/check", body, {"content-type": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
PY

# run STORE RULE -> "instructions redis_usec_per_call"
run() {
  local out="$TMP/cg.$1.$2" args=(serve --listen "127.0.0.1:$PORT")
  [ "$1" = redis ] && args+=(--redis-url "redis://127.0.0.1:$REDIS_PORT")
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  RATEKEEPER_LOG__LEVEL=warn valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$BIN" "${args[@]}" >"$TMP/log.$1.$2" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  python3 "$TMP/drive.py" "$PORT" "$N" "$2"
  kill -INT "$pid"; wait "$pid" || true
  local total usec
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  usec=$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' \
    | awk -F'usec_per_call=' '/^cmdstat_evalsha:/ { split($2, a, ","); print a[1] }')
  echo "$total ${usec:-0}"
}

OUT=bench/results/calendar_cost-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# A calendar day against a fixed 1d window, per check, $(date -u +%F)"
  echo
  echo "$N checks of distinct keys over one connection, ratekeeper under callgrind (\`bash bench/calendar_cost.sh\`)."
  echo "Instructions are ratekeeper's whole program divided by $N (startup included, the same in every row);"
  echo "Redis µs/call is EVALSHA's usec_per_call from Redis's commandstats."
  echo
  echo "| store | rule | instructions / check | × fixed | Redis µs / call | × fixed |"
  echo "|---|---|---|---|---|---|"
} > "$OUT"
for store in memory redis; do
  read -r fixed_i fixed_u < <(run "$store" fixed)
  read -r cal_i cal_u < <(run "$store" calendar)
  row() { # rule instructions usec
    awk -v s="$store" -v r="$1" -v i="$2" -v u="$3" -v fi="$fixed_i" -v fu="$fixed_u" -v n="$N" 'BEGIN {
      ru = (s == "redis") ? sprintf("%.2f | %.2f", u, fu ? u / fu : 0) : "- | -"
      printf "| %s | %s | %.0f | %.2f | %s |\n", s, r, i / n, i / fi, ru }'
  }
  row fixed "$fixed_i" "$fixed_u" | tee -a "$OUT"
  row calendar "$cal_i" "$cal_u" | tee -a "$OUT"
done
echo "wrote $OUT" >&2
