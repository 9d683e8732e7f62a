#!/usr/bin/env bash
# The sliding log's worst case in Redis, before and after bounding it
# (issue 6, defect 1): the longest single check as Redis's SLOWLOG times it
# (slowlog-log-slower-than 0, so every call is logged) and MEMORY USAGE of
# one key at its largest.
#
#   bash bench/slowlog.sh [BEFORE_BINARY] [AFTER_BINARY]
#
# Each binary only prints its script (`ratekeeper script sliding_log`); the
# defaults are main's build and this tree's debug build (the script text is
# the same in any profile). Scenarios, each on a fresh key, limit 100 000 unless said:
#   dos    one check of cost 100 000 on a 366-day window (the issue's request)
#   spread 20 000 checks of cost 1, 1 ms apart, on a 10 s window: the log
#          is always full of distinct instants, its worst shape
#   denied 20 000 checks of cost 1, 10 µs apart, limit 1 000 per 10 s: the
#          first 1 000 pass, the rest are denied (a denial scans the log for
#          its exact retry_after)
#   widest 63 checks 1 µs apart, then 63 one second apart, on a 63 s window
#          (slots of 1 s): the log at its most entries
#   burst  20 000 checks of cost 1 at distinct microseconds on a 366-day
#          window (all within one slot once the log holds 63 entries)
# Writes bench/results/slowlog-<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${1:-/work/main/target/debug/ratekeeper}
AFTER=${2:-target/debug/ratekeeper}
[ -x "$AFTER" ] || cargo build --bin ratekeeper 2>&1 | tail -1 >&2

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TMP=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
REDIS=$!
trap 'kill $REDIS 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli() { redis-cli -p "$PORT" "$@"; }
# Redis 7 logs the commands a script calls too, several per check.
rcli CONFIG SET slowlog-max-len 1000000 >/dev/null

T0=1767225600000000
DAY=86400000000
N=20000

# scenario SHA KEY: EVALSHA lines (ARGV: now, limit, window_us, cost, burst, pad).
commands() {
  local sha=$1 key=$2 scenario=$3
  case $scenario in
    dos) echo "EVALSHA $sha 1 $key $T0 100000 $((366 * DAY)) 100000 100000 0" ;;
    spread) awk -v s="$sha" -v k="$key" -v t="$T0" -v n="$N" \
      'BEGIN { for (i = 0; i < n; i++) printf "EVALSHA %s 1 %s %.0f 100000 10000000 1 100000 0\n", s, k, t + i * 1000 }' ;;
    denied) awk -v s="$sha" -v k="$key" -v t="$T0" -v n="$N" \
      'BEGIN { for (i = 0; i < n; i++) printf "EVALSHA %s 1 %s %.0f 1000 10000000 1 1000 0\n", s, k, t + i * 10 }' ;;
    widest) awk -v s="$sha" -v k="$key" -v t="$T0" \
      'BEGIN { for (i = 0; i < 63; i++) printf "EVALSHA %s 1 %s %.0f 100000 63000000 1 100000 0\n", s, k, t + i
               for (j = 0; j < 63; j++) printf "EVALSHA %s 1 %s %.0f 100000 63000000 1 100000 0\n", s, k, t + j * 1000000 + 500000 }' ;;
    burst) awk -v s="$sha" -v k="$key" -v t="$T0" -v n="$N" -v w="$((366 * DAY))" \
      'BEGIN { for (i = 0; i < n; i++) printf "EVALSHA %s 1 %s %.0f 100000 %.0f 1 100000 0\n", s, k, t + i, w }' ;;
  esac
}

# measure LABEL BINARY SCENARIO -> one table row
measure() {
  local label=$1 bin=$2 scenario=$3 key="bench:$1:$3"
  local sha
  sha=$(rcli SCRIPT LOAD "$("$bin" script sliding_log)")
  rcli CONFIG SET slowlog-log-slower-than 0 >/dev/null
  rcli SLOWLOG RESET >/dev/null
  commands "$sha" "$key" "$scenario" | rcli >/dev/null
  rcli CONFIG SET slowlog-log-slower-than 10000 >/dev/null
  # SLOWLOG GET entries: id, timestamp, duration (µs), args...; keep EVALSHA's.
  local stats
  stats=$(rcli --json SLOWLOG GET 1000000 | python3 -c '
import json, sys
d = sorted(e[2] for e in json.load(sys.stdin) if str(e[3][0]).upper() == "EVALSHA")
print(len(d), "|", d[len(d) // 2], "|", d[min(len(d) - 1, len(d) * 99 // 100)], "|", d[-1])')
  printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$scenario" "$stats" \
    "$(rcli MEMORY USAGE "$key")" "$(rcli ZCARD "$key")" "$(rcli OBJECT ENCODING "$key")"
}

OUT=bench/results/slowlog-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Sliding log worst case in Redis, $(date -u +%F)"
  echo
  echo "Produced by \`bash bench/slowlog.sh\` on Redis $(redis-server --version | awk '{print $3}' | cut -d= -f2)."
  echo "before: \`$BEFORE\` (one member per unit); after: \`$AFTER\` (one member per instant, at most 127, plus the running total)."
  echo "Times: EVALSHA durations of the scenario in SLOWLOG (µs, Redis's own time, no network);"
  echo "on a shared 2-core machine a single worst value can include a scheduling hiccup, so"
  echo "median and p99 are shown too. Memory: MEMORY USAGE of the key after the scenario."
  echo
  echo "| version | scenario | checks | median (µs) | p99 (µs) | worst check (µs) | key memory (B) | members | encoding |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for scenario in dos spread denied widest burst; do
    measure before "$BEFORE" "$scenario"
    measure after "$AFTER" "$scenario"
  done
} | tee "$OUT"
echo "wrote $OUT" >&2
