#!/usr/bin/env bash
# Latency of one check, embedded store vs Redis, measured side by side in one
# run: builds release, starts its own redis-server on a free port and
# ratekeeper twice (memory, redis), and drives both with wrk over keep-alive
# connections. Writes a Markdown table to bench/results/.
#
#   bash bench/latency.sh                # 10 s per cell
#   DURATION=30s bash bench/latency.sh
#
# Needs wrk and redis-server (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
ALGORITHMS=${ALGORITHMS:-"sliding_window gcra"}

need() { command -v "$1" >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; }
need wrk wrk
need redis-server redis-server

cargo build --release --locked --bin ratekeeper >/dev/null 2>&1
BIN=target/release/ratekeeper

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
pids+=($!)
MEM_PORT=$(free_port)
RK_PORT=$(free_port)
RATEKEEPER_LOG__LEVEL=warn $BIN serve --listen 127.0.0.1:$MEM_PORT >/dev/null &
pids+=($!)
RATEKEEPER_LOG__LEVEL=warn $BIN serve --listen 127.0.0.1:$RK_PORT --redis-url redis://127.0.0.1:$REDIS_PORT >/dev/null &
pids+=($!)
for port in $MEM_PORT $RK_PORT; do
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
done

run() { # store port algorithm connections
  ALGORITHM=$3 wrk -t1 -c"$4" -d"$DURATION" -s bench/check.lua "http://127.0.0.1:$2" | grep '^RESULT'
}

OUT=bench/results/latency-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Check latency: embedded store vs Redis"
  echo
  echo "$(date -u +%F), $(nproc) cores, wrk ${DURATION} per row, keep-alive, 100k distinct keys, all allowed."
  echo "wrk, ratekeeper and redis-server share the machine. Ratios are within this one run."
  echo
  echo "| algorithm | connections | store | p50 µs | p99 µs | p99.9 µs | checks/s | errors |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$OUT"
for algorithm in $ALGORITHMS; do
  for conns in 1 64; do
    for store in memory redis; do
      port=$MEM_PORT; [ "$store" = redis ] && port=$RK_PORT
      line=$(run "$store" "$port" "$algorithm" "$conns")
      eval "${line#RESULT }"
      echo "| $algorithm | $conns | $store | $p50_us | $p99_us | $p999_us | $rps | $errors |" >> "$OUT"
    done
  done
done
cat "$OUT"
echo "written to $OUT"
