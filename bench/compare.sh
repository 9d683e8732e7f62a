#!/usr/bin/env bash
# Two builds side by side in one run, so their ratio means something on a
# shared machine:
#
#   bash bench/compare.sh OLD_BINARY NEW_BINARY
#   ROUNDS=3 DURATION=5s bash bench/compare.sh /tmp/rk-old target/release/ratekeeper
#
# Each binary runs twice (embedded store; Redis with its default batching)
# against one redis-server; wrk drives each target in turn, OLD then NEW,
# ROUNDS times, for each scenario (bench/scenario.lua), algorithm and
# connection count, and the median of the rounds goes in the table, with
# NEW / OLD. Writes bench/results/compare-<UTC time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/compare.sh OLD_BINARY NEW_BINARY}
NEW=${2:?usage: bench/compare.sh OLD_BINARY NEW_BINARY}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
ALGORITHMS=${ALGORITHMS:-"sliding_window gcra"}
SCENARIOS=${SCENARIOS:-"spread flood"}
CONNECTIONS=${CONNECTIONS:-"1 64"}
for tool in wrk redis-server curl; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install ${tool/redis-server/redis-server})" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
pids+=($!)

declare -A PORT
start() { # name binary [args...]
  local name=$1 bin=$2; shift 2
  PORT[$name]=$(free_port)
  RATEKEEPER_LOG__LEVEL=warn "$bin" serve --listen "127.0.0.1:${PORT[$name]}" "$@" >/dev/null 2>&1 &
  pids+=($!)
}
for v in old new; do
  bin=$OLD; [ "$v" = new ] && bin=$NEW
  start "$v-memory" "$bin"
  start "$v-redis" "$bin" --redis-url "redis://127.0.0.1:$REDIS_PORT"
done
for name in "${!PORT[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[$name]}/readyz" >/dev/null && break; sleep 0.1; done
done

rps() { # name scenario algorithm connections -> checks/s and p50 µs
  local line
  line=$(SCENARIO=$2 ALGORITHM=$3 wrk -t1 -c"$4" -d"$DURATION" -s bench/scenario.lua \
    "http://127.0.0.1:${PORT[$1]}" | grep '^RESULT')
  eval "${line#RESULT }"
  echo "$rps $p50_us"
}
median() { tr ' ' '\n' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

OUT=bench/results/compare-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Two builds side by side, $(date -u +%F)"
  echo
  echo "OLD: \`$OLD\`; NEW: \`$NEW\`. $(nproc) cores shared by wrk, both builds and redis-server;"
  echo "wrk ${DURATION} per cell, OLD and NEW alternating, median of $ROUNDS rounds. Produced by \`bash bench/compare.sh\`."
  echo
  echo "| store | scenario | algorithm | connections | OLD checks/s | NEW checks/s | NEW / OLD | OLD p50 µs | NEW p50 µs |"
  echo "|---|---|---|---|---|---|---|---|---|"
} > "$OUT"
for store in memory redis; do
  for scenario in $SCENARIOS; do
    for algorithm in $ALGORITHMS; do
      for c in $CONNECTIONS; do
        old_r=() new_r=() old_p=() new_p=()
        for _ in $(seq "$ROUNDS"); do
          read -r r p < <(rps "old-$store" "$scenario" "$algorithm" "$c"); old_r+=("$r"); old_p+=("$p")
          read -r r p < <(rps "new-$store" "$scenario" "$algorithm" "$c"); new_r+=("$r"); new_p+=("$p")
        done
        o=$(echo "${old_r[*]}" | median); n=$(echo "${new_r[*]}" | median)
        op=$(echo "${old_p[*]}" | median); np=$(echo "${new_p[*]}" | median)
        ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.2f", o ? n / o : 0 }')
        echo "| $store | $scenario | $algorithm | $c | $o | $n | $ratio | $op | $np |" | tee -a "$OUT"
      done
    done
  done
done
echo "wrote $OUT" >&2
