#!/usr/bin/env bash
# What a check costs Redis and ratekeeper in CPU, over HTTP, for one or two
# builds side by side in one run (issue 19's goals are ratios of these):
#
#   bash bench/redis_cpu.sh                               # target/release/ratekeeper
#   bash bench/redis_cpu.sh OLD_BINARY NEW_BINARY
#   CELLS="spread:fixed_window:one flood:gcra:one" bash bench/redis_cpu.sh
#
# Each binary runs three times: the embedded store, Redis with micro-batching
# off (`redis.batch_window = 0us`) and on (100us), all against one
# redis-server. wrk drives each target in turn (bench/scenario.lua) at
# CONNECTIONS connections, ROUNDS times; the table keeps each cell's median.
#
# CELLS: scenario:algorithm:shape, where shape is `one` (the ALGORITHM rule)
# or `two` (gcra 1s + fixed_window 1d inline, scenario.lua's SHAPE=two).
#
# Columns, per check:
#   server µs    ratekeeper's own CPU (utime + stime of all its threads)
#   Redis µs     the redis-server main thread's CPU (/proc/PID/schedstat,
#                nanoseconds): the script, the commands it runs, reading
#                requests and writing replies; what the issue calls Redis
#                CPU per check
#   script µs    commandstats usec of FCALL/EVALSHA/EVAL: the script's own time
#   calls        script calls (round trips) per check
set -euo pipefail
cd "$(dirname "$0")/.."
BINARIES=("${@:-target/release/ratekeeper}")
DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
CELLS=${CELLS:-"spread:fixed_window:one spread:gcra:one spread:gcra:two flood:gcra:one flood:token_bucket:one flood:fixed_window:one"}
MODES=${MODES:-"memory unbatched batched"}
for tool in wrk redis-server redis-cli curl; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install wrk redis-server curl)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
REDIS_PID=$!
pids+=("$REDIS_PID")
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
for _ in $(seq 50); do [ "$(rcli ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done

declare -A PORT PID
start() { # name binary mode
  local name=$1 bin=$2 mode=$3 port
  port=$(free_port)
  case $mode in
    memory) RATEKEEPER_LOG__LEVEL=warn "$bin" serve --listen "127.0.0.1:$port" >/dev/null 2>&1 & ;;
    unbatched) RATEKEEPER_LOG__LEVEL=warn RATEKEEPER_REDIS__BATCH_WINDOW=0us "$bin" serve \
      --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$REDIS_PORT" >/dev/null 2>&1 & ;;
    batched) RATEKEEPER_LOG__LEVEL=warn RATEKEEPER_REDIS__BATCH_WINDOW=100us "$bin" serve \
      --listen "127.0.0.1:$port" --redis-url "redis://127.0.0.1:$REDIS_PORT" >/dev/null 2>&1 & ;;
  esac
  PID[$name]=$!
  PORT[$name]=$port
  pids+=("${PID[$name]}")
}
for i in "${!BINARIES[@]}"; do
  for mode in $MODES; do start "$i-$mode" "${BINARIES[$i]}" "$mode"; done
done
for name in "${!PORT[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[$name]}/readyz" >/dev/null && break; sleep 0.1; done
done

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis_ns() { awk '{print $1}' "/proc/$REDIS_PID/schedstat"; }
checks_total() {
  curl -s "http://127.0.0.1:$1/metrics" | awk 'index($0, "ratekeeper_checks_total{") == 1 { s += $2 } END { print s + 0 }'
}
script_stats() { # -> calls usec
  rcli info commandstats | tr -d '\r' | awk -F'[:=,]' \
    '/^cmdstat_(evalsha|eval|fcall):/ { c += $3; u += $5 } END { print c + 0, u + 0 }'
}

# One wrk run; prints rps server_us redis_us script_us calls (per check).
measure() { # name scenario algorithm shape
  local name=$1 port=${PORT[$1]} pid=${PID[$1]} line
  local n0 cpu0 ns0 n1 cpu1 ns1 calls usec
  rcli config resetstat >/dev/null
  n0=$(checks_total "$port"); cpu0=$(cpu_ticks "$pid"); ns0=$(redis_ns)
  line=$(SCENARIO=$2 ALGORITHM=$3 SHAPE=$([ "$4" = two ] && echo two || true) \
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bench/scenario.lua "http://127.0.0.1:$port" | grep '^RESULT')
  cpu1=$(cpu_ticks "$pid"); ns1=$(redis_ns); n1=$(checks_total "$port")
  read -r calls usec < <(script_stats)
  eval "${line#RESULT }"
  awk -v n=$((n1 - n0)) -v t=$((cpu1 - cpu0)) -v hz="$TICKS" -v ns=$((ns1 - ns0)) \
    -v c="$calls" -v u="$usec" -v rps="$rps" -v mem="${name#*-}" 'BEGIN {
      if (n == 0) { print "0 0 0 0 0"; exit }
      r = (mem == "memory") ? 0 : ns / 1000 / n
      printf "%.0f %.2f %.2f %.2f %.3f\n", rps, t / hz * 1e6 / n, r, u / n, c / n }'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

OUT=bench/results/redis_cpu-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# CPU per check over HTTP, $(date -u +%F)"
  echo
  echo "$(nproc) cores shared by wrk, every ratekeeper and redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2);"
  echo "$CONNECTIONS connections, wrk $DURATION per cell, targets alternating, median of $ROUNDS rounds."
  echo "Produced by \`bash bench/redis_cpu.sh ${BINARIES[*]}\`."
  for i in "${!BINARIES[@]}"; do echo "- binary $i: \`${BINARIES[$i]}\`"; done
  echo
  echo "| scenario | algorithm | shape | binary | store | checks/s | server µs | Redis µs | script µs | calls |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$OUT"
for cell in $CELLS; do
  IFS=: read -r scenario algorithm shape <<< "$cell"
  declare -A RES=()
  for _ in $(seq "$ROUNDS"); do
    for i in "${!BINARIES[@]}"; do for mode in $MODES; do
      RES[$i-$mode]="${RES[$i-$mode]:-}|$(measure "$i-$mode" "$scenario" "$algorithm" "$shape")"
    done; done
  done
  for i in "${!BINARIES[@]}"; do for mode in $MODES; do
    row=""
    for col in 1 2 3 4 5; do
      row="$row | $(echo "${RES[$i-$mode]}" | tr '|' '\n' | grep -v '^$' | awk -v c=$col '{print $c}' | median)"
    done
    echo "| $scenario | $algorithm | $shape | $i | $mode$row |" | tee -a "$OUT"
  done; done
  unset RES
done
echo "wrote $OUT" >&2
