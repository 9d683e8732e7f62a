#!/usr/bin/env bash
# One hot key on two instances (issue 19, part 2): every request of two wrk
# clients, CONNECTIONS connections each, checks one key of one policy. Three
# ways, interleaved, ROUNDS times, medians kept:
#   embedded   each instance on its own embedded store (the ceiling: no
#              Redis, and no shared limit either)
#   redis      both on one redis-server, the policy without a lease mode
#   leased     both on it, the policy with lease = { max_units = 2000 }
# The limit is never reached (1e9 a second): this measures the path of an
# allowed check. Columns: checks/s of both instances together, script calls
# to Redis per check (commandstats), and leased checks/s over embedded.
#
#   bash bench/hot_key.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/ratekeeper}
DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
for tool in wrk redis-server redis-cli curl; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install wrk redis-server curl)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "$BIN: build it first (cargo build --release)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
pids+=("$!")
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
for _ in $(seq 50); do [ "$(rcli ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done

cat > "$TMP/policies.toml" <<'TOML'
[policies.hot]
lease = { max_units = 2000, ttl = "1s" }
limits = [{ name = "all", algorithm = "fixed_window", limit = 1000000000, window = "1s" }]

[policies.plain]
limits = [{ name = "all", algorithm = "fixed_window", limit = 1000000000, window = "1s" }]
TOML

declare -A PORT
start() { # name redis?
  local port
  port=$(free_port)
  if [ "$2" = redis ]; then
    RATEKEEPER_LOG__LEVEL=warn "$BIN" serve --listen "127.0.0.1:$port" --policies "$TMP/policies.toml" \
      --redis-url "redis://127.0.0.1:$REDIS_PORT" >/dev/null 2>&1 &
  else
    RATEKEEPER_LOG__LEVEL=warn "$BIN" serve --listen "127.0.0.1:$port" --policies "$TMP/policies.toml" >/dev/null 2>&1 &
  fi
  pids+=("$!")
  PORT[$1]=$port
}
start emb-a memory; start emb-b memory; start red-a redis; start red-b redis
for name in "${!PORT[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[$name]}/readyz" >/dev/null && break; sleep 0.1; done
done

calls() { rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_(evalsha|eval|fcall):/ { c += $3 } END { print c + 0 }'; }

# Both instances of a pair at once; prints "rps calls_per_check".
measure() { # a b policy
  rcli config resetstat >/dev/null
  local out
  out=$( (POLICY=$3 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bench/hot_key.lua "http://127.0.0.1:${PORT[$1]}" &
          POLICY=$3 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bench/hot_key.lua "http://127.0.0.1:${PORT[$2]}" &
          wait) | grep '^RESULT')
  if echo "$out" | grep -qv 'non2xx=0$'; then echo "non-2xx answers: $out" >&2; exit 1; fi
  out=$(echo "$out" | sed 's/.*rps=\([0-9]*\).*/\1/' | awk '{ s += $1 } END { print s }')
  local secs=${DURATION%s} c
  c=$(calls)
  awk -v rps="$out" -v c="$c" -v s="$secs" 'BEGIN { printf "%.0f %.4f\n", rps, c / (rps * s) }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

declare -A RPS CALLS
for _ in $(seq "$ROUNDS"); do
  for way in embedded redis leased; do
    case $way in
      embedded) read -r r c < <(measure emb-a emb-b hot) ;;
      redis) read -r r c < <(measure red-a red-b plain) ;;
      leased) read -r r c < <(measure red-a red-b hot) ;;
    esac
    RPS[$way]="${RPS[$way]:-} $r"; CALLS[$way]="${CALLS[$way]:-} $c"
  done
done

OUT=bench/results/hot_key-$(date -u +%Y%m%dT%H%M%SZ).md
emb=$(echo "${RPS[embedded]}" | tr ' ' '\n' | grep -v '^$' | median)
{
  echo "# One hot key on two instances, $(date -u +%F)"
  echo
  echo "$(nproc) cores shared by two wrk clients, the instances and redis-server; $CONNECTIONS connections per instance,"
  echo "wrk $DURATION per cell, ways interleaved, median of $ROUNDS rounds. Produced by \`bash bench/hot_key.sh\`."
  echo
  echo "| way | checks/s (both instances) | Redis calls per check | checks/s over embedded |"
  echo "|---|---|---|---|"
  for way in embedded redis leased; do
    r=$(echo "${RPS[$way]}" | tr ' ' '\n' | grep -v '^$' | median)
    c=$(echo "${CALLS[$way]}" | tr ' ' '\n' | grep -v '^$' | median)
    awk -v w="$way" -v r="$r" -v c="$c" -v e="$emb" 'BEGIN { printf "| %s | %d | %.4f | %.2f |\n", w, r, c, r / e }'
  done
} | tee "$OUT"
echo "wrote $OUT" >&2
