#!/usr/bin/env bash
# The Redis ceiling alone (the first table of bench/run.sh), without wrk
# or a release build: what one call of the check script (FCALL, or EVALSHA
# for a build without the function library) costs Redis with
# one limit of each algorithm, with two limits, and with a batch of 15
# checks in one call; for one build, or for several side by side (each
# binary's own script, rounds interleaved).
#
#   bash bench/ceiling.sh
#   ALGORITHMS="gcra fixed_window" CONNECTIONS="64" bash bench/ceiling.sh
#   CONNECTIONS=64 bash bench/ceiling.sh OLD_BINARY NEW_BINARY
#
# Writes bench/results/ceiling-<time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ALGORITHMS=${ALGORITHMS:-"fixed_window sliding_window sliding_log token_bucket gcra"}
CONNECTIONS=${CONNECTIONS:-"1 64"}
ROUNDS=${ROUNDS:-3}
BINARIES=("${@:-target/debug/ratekeeper}")
[ -x "${BINARIES[0]}" ] || cargo build --bin ratekeeper 2>&1 | tail -1 >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
pids+=($!)
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
for _ in $(seq 50); do [ "$(rcli ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
source bench/ceiling_lib.sh

ROWS=""
for a in $ALGORITHMS; do ROWS="$ROWS one:$a"; done
case " $ALGORITHMS " in *" gcra "*) ;; *) ROWS="$ROWS one:gcra";; esac
ROWS="$ROWS two batch"

# Rounds interleave the rows, so a burst of other load on the machine
# touches every row alike; the table keeps each row's median.
declare -A ALL ALL_P50 ALL_US CALL_OF
for round in $(seq "$ROUNDS"); do
  for i in "${!BINARIES[@]}"; do
    BIN=${BINARIES[$i]}
    measure_ceiling "$CONNECTIONS" $ROWS
    CALL_OF[$i]=$CEILING_CALL
    for row in $ROWS; do for c in $CONNECTIONS; do
      ALL[$i,$row,$c]="${ALL[$i,$row,$c]:-} ${CEILING[$row,$c]}"
      ALL_P50[$i,$row,$c]="${ALL_P50[$i,$row,$c]:-} ${CEILING_P50[$row,$c]}"
      ALL_US[$i,$row,$c]="${ALL_US[$i,$row,$c]:-} ${CEILING_US[$row,$c]}"
      echo "round $round binary $i $row c=$c: ${CEILING[$row,$c]}/s, ${CEILING_US[$row,$c]} µs in Redis" >&2
    done; done
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

OUT=bench/results/ceiling-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Redis ceiling of the check script, $(date -u +%F)"
  echo
  echo "$(nproc) cores shared with other work; redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2);"
  echo "redis-benchmark, no pipelining, 100k random keys, every check allowed; median of $ROUNDS interleaved rounds"
  echo "(30k calls per round at 1 connection, 300k at 64). Produced by \`bash bench/ceiling.sh\`."
  echo
  echo "\`µs in Redis\` is Redis's own time per call (INFO commandstats, usec_per_call of FCALL or EVALSHA): the"
  echo "script's cost, which the other load on this machine disturbs far less than calls/s. Ratios are"
  echo "over the one-limit gcra row (the two-limit call's first limit) at the same concurrency."
  echo
  for i in "${!BINARIES[@]}"; do echo "- binary $i: \`${BINARIES[$i]}\`, called with ${CALL_OF[$i]}"; done
  echo
  echo "\`µs per check\` divides a call's µs in Redis by the checks it carries ($BATCH_CHECKS for the batch row)."
  echo
  echo "| script call | binary | connections | calls/s | p50 µs | µs in Redis | µs per check | calls/s ÷ 1 limit gcra | µs in Redis ÷ 1 limit gcra | rounds (calls/s) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for row in $ROWS; do for i in "${!BINARIES[@]}"; do for c in $CONNECTIONS; do
    rps=$(echo "${ALL[$i,$row,$c]}" | median)
    p50=$(echo "${ALL_P50[$i,$row,$c]}" | median)
    us=$(echo "${ALL_US[$i,$row,$c]}" | median)
    base=$(echo "${ALL[$i,one:gcra,$c]}" | median)
    base_us=$(echo "${ALL_US[$i,one:gcra,$c]}" | median)
    per=1; [ "$row" = batch ] && per=$BATCH_CHECKS
    per_check=$(awk -v a="$us" -v n="$per" 'BEGIN { printf "%.2f", a / n }')
    ratio=$(awk -v a="$rps" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
    ratio_us=$(awk -v a="$us" -v b="$base_us" 'BEGIN { printf "%.2f", a / b }')
    echo "| $(ceiling_label "$row") | $i | $c | $rps | $p50 | $us | $per_check | $ratio | $ratio_us |${ALL[$i,$row,$c]} |"
  done; done; done
} > "$OUT"
cat "$OUT"
echo "written to $OUT" >&2
