#!/usr/bin/env bash
# Batches of checks against single checks, in one run:
#
#   bash bench/batch.sh                      # 5 s cells, 3 rounds
#   DURATION=4s ROUNDS=1 bash bench/batch.sh
#   BATCH=20 ALGORITHMS=gcra bash bench/batch.sh
#
# Builds release; starts its own redis-server on a free port and ratekeeper
# twice (the embedded store; the Redis store with its defaults: micro-batching
# at redis.batch_window = 100us, redis.timeout = 100ms, failing open); then,
# for each store, algorithm and connection count (CONNECTIONS, "64 8"),
# drives the same spread of 100k keys (bench/scenario.lua, nothing denied)
# with wrk over keep-alive connections, as single checks (POST /v1/check) and
# as batches of BATCH (100) checks (POST /v1/checks), alternating, ROUNDS
# times. The table has the median round of each, counted per check (a
# batch's requests/s × BATCH): answered, and decided by the store (not
# degraded: 64 batches of 100 are 6400 checks in flight, which can queue
# past redis.timeout), batch ÷ single of the decided, and what each check
# cost: ratekeeper's and redis-server's CPU, script calls and Redis's own
# time (commandstats). Writes bench/results/batch-<UTC time>.md.
#
# Everything shares the 2 cores (wrk, ratekeeper, redis-server, and whatever
# else runs): read the ratios, measured in one run, not the absolute numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
BATCH=${BATCH:-100}
CONNECTIONS=${CONNECTIONS:-"64 8"}
ALGORITHMS=${ALGORITHMS:-"sliding_window gcra"}

need() {
  command -v "$1" >/dev/null 2>&1 && return
  echo "installing $2" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}
need wrk wrk
need redis-server redis-server
need redis-cli redis-tools
need curl curl

echo "building release..." >&2
cargo build --release --locked --bin ratekeeper 2>&1 | tail -1 >&2
BIN=${CARGO_TARGET_DIR:-target}/release/ratekeeper

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
REDIS_PID=$!
pids+=($!)
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

declare -A PORT PID
start() { # name args...
  local name=$1; shift
  PORT[$name]=$(free_port)
  RATEKEEPER_LOG__LEVEL=warn "$BIN" serve --listen "127.0.0.1:${PORT[$name]}" "$@" >/dev/null 2>&1 &
  PID[$name]=$!
  pids+=($!)
}
start memory
start redis --redis-url "redis://127.0.0.1:$REDIS_PORT"
for name in memory redis; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[$name]}/readyz" >/dev/null && break; sleep 0.1; done
done

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # port name: the sum of its series
  curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2{" 'index($0, m) == 1 { s += $2 } END { printf "%d", s }'
}
redis_calls() {
  rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_(evalsha|eval|fcall):/ { s += $3 } END { print s + 0 }'
}
redis_usec() {
  rcli info commandstats | tr -d '\r' | awk -F'usec=' '/^cmdstat_(evalsha|eval|fcall):/ { split($2, v, ","); s += v[1] } END { print s + 0 }'
}

# One wrk run; prints: checks/s answered, checks/s decided by the store (not
# degraded), degraded share, p50 µs of a request, ratekeeper CPU µs per
# check, redis-server CPU µs per decided check, script calls and Redis µs per
# decided check (the last three 0 on the embedded store), errors.
measure() { # store scenario algorithm connections
  local store=$1 port=${PORT[$1]} pid=${PID[$1]} line checks0 degraded0 cpu0 rcpu0 cpu1 rcpu1
  # Let the last cell's late script calls drain and an opened breaker close.
  sleep 2
  rcli config resetstat >/dev/null
  checks0=$(metric "$port" ratekeeper_checks_total); degraded0=$(metric "$port" ratekeeper_degraded_total)
  cpu0=$(cpu_ticks "$pid"); rcpu0=$(cpu_ticks "$REDIS_PID")
  line=$(SCENARIO=$2 ALGORITHM=$3 BATCH=$BATCH wrk -t1 -c"$4" -d"$DURATION" \
    -s bench/scenario.lua "http://127.0.0.1:$port" | grep '^RESULT')
  cpu1=$(cpu_ticks "$pid"); rcpu1=$(cpu_ticks "$REDIS_PID")
  eval "${line#RESULT }"
  local checks degraded calls=0 usec=0
  checks=$(( $(metric "$port" ratekeeper_checks_total) - checks0 ))
  degraded=$(( $(metric "$port" ratekeeper_degraded_total) - degraded0 ))
  if [ "$store" = redis ]; then calls=$(redis_calls); usec=$(redis_usec); fi
  awk -v rps="$rps" -v per="$per_request" -v p50="$p50_us" -v n="$checks" -v d="$degraded" \
    -v hz="$TICKS" -v t=$((cpu1 - cpu0)) -v rt=$((rcpu1 - rcpu0)) -v calls="$calls" -v usec="$usec" \
    -v errors="$errors" \
    'BEGIN { if (n == 0) n = 1; decided = n - d; if (decided == 0) decided = 1;
             printf "%.0f %.0f %.1f%% %d %.2f %.2f %.3f %.2f %d\n", rps * per, rps * per * (n - d) / n,
               100 * d / n, p50, t / hz / n * 1e6, (calls ? rt / hz / decided * 1e6 : 0),
               calls / decided, usec / decided, errors }'
}
# Of several `measure` lines, the one with the median decided/s, whole.
pick() { printf '%s\n' "$@" | sort -n -k2,2 | awk -v n="$#" 'NR == int((n + 1) / 2)'; }

OUT=bench/results/batch-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Batches of $BATCH checks against single checks, $(date -u +%F)"
  echo
  echo "What it compares: the same checks (100k distinct keys, nothing denied) sent one per"
  echo "\`POST /v1/check\` and $BATCH per \`POST /v1/checks\`, to the same instance, over the same number"
  echo "of keep-alive connections. $(nproc) cores shared by wrk, ratekeeper, redis-server and other work;"
  echo "wrk ${DURATION} per cell, single and batch alternating, the median of $ROUNDS round(s)."
  echo "Produced by \`bash bench/batch.sh\`. Stores: the embedded store; Redis with its default"
  echo "micro-batching (\`redis.batch_window = 100us\`), \`redis.timeout = 100ms\` and \`failure.mode = open\`."
  echo
  echo "\`answered/s\` counts checks (a batch's requests/s × $BATCH); \`decided/s\` leaves out the degraded"
  echo "ones, answered by the failure policy because the store did not answer within \`redis.timeout\`"
  echo "(\`ratekeeper_degraded_total\`), and \`÷ single\` compares those. \`p50 µs\` is a request's (a"
  echo "batch's: all $BATCH answers). CPU is µs of user+system time: ratekeeper's per answered check,"
  echo "redis-server's per decided check; Redis calls and µs are commandstats' FCALL (or EVALSHA) calls and time"
  echo "per decided check."
  echo
  echo "| store | algorithm | conns | form | answered/s | decided/s | degraded | ÷ single | p50 µs | ratekeeper CPU µs/check | redis CPU µs/check | Redis calls/check | Redis µs/check | errors |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$OUT"
for store in memory redis; do
  for algorithm in $ALGORITHMS; do
    for conns in $CONNECTIONS; do
      single=() batched=()
      for _ in $(seq "$ROUNDS"); do
        single+=("$(measure "$store" spread "$algorithm" "$conns")")
        batched+=("$(measure "$store" batch "$algorithm" "$conns")")
      done
      s=$(pick "${single[@]}"); b=$(pick "${batched[@]}")
      read -r _ sd _ <<< "$s"; read -r _ bd _ <<< "$b"
      ratio=$(awk -v s="$sd" -v b="$bd" 'BEGIN { printf "%.2f", s ? b / s : 0 }')
      read -r r d g p cpu rcpu calls us e <<< "$s"
      echo "| $store | $algorithm | $conns | single | $r | $d | $g | | $p | $cpu | $rcpu | $calls | $us | $e |" | tee -a "$OUT"
      read -r r d g p cpu rcpu calls us e <<< "$b"
      echo "| $store | $algorithm | $conns | batch of $BATCH | $r | $d | $g | $ratio | $p | $cpu | $rcpu | $calls | $us | $e |" | tee -a "$OUT"
    done
  done
done
echo "wrote $OUT" >&2
