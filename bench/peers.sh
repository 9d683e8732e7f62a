#!/usr/bin/env bash
# ratekeeper side by side with a peer (Kuadrant/limitador's HTTP API), in the
# same scenarios, interleaved, in one run (issue 19, part 3):
#
#   bash bench/peers.sh PEER_BIN [RATEKEEPER_BIN]   # PEER_BIN: a limitador-server you built
#   bash bench/peers.sh                             # ratekeeper's rows alone
#
# limitador's source is on none of the registries this project reaches, so
# the project cannot build it: bring your own binary (`cargo build --release`
# in a clone of github.com/Kuadrant/limitador gives target/release/limitador-server).
#
# Targets, each its own server on one shared redis-server:
#   rk-memory     ratekeeper, embedded store
#   rk-redis      ratekeeper on Redis, micro-batching off (redis.batch_window = 0us)
#   rk-batched    ratekeeper on Redis, micro-batching on (100us, the default)
#   peer-memory   limitador-server LIMITS memory
#   peer-redis    limitador-server LIMITS redis redis://...
# Scenarios (bench/peer.lua): spread (100k keys, all allowed) and flood (95 %
# of checks on one key over its limit). Both servers get the same limits:
#   ratekeeper   policies spread (fixed_window 1000000/1s) and flood (100/1s)
#   limitador    namespaces spread and flood, same max_value and seconds, one
#                variable: the key
# and the same requests: POST /v1/check {"policy": P, "key": K} against
# POST /check_and_report {"namespace": P, "values": {"key": K}, "delta": 1}.
# A denial is 200 {"allowed": false} from ratekeeper, 429 from limitador.
#
# Columns per check: checks/s, the server's CPU (utime + stime), the
# redis-server main thread's CPU (schedstat), and Redis commands per check
# (commandstats, every command but INFO and CONFIG, those a script runs
# included: limitador sends plain commands, ratekeeper one FCALL per call,
# which runs HMGET, HSET, ... inside).
#
# The limits file is written for limitador 1.x (`variables: [key]`); for 2.x,
# whose conditions and variables are CEL over `descriptors[0]`, the script
# tries `descriptors[0].key` when the first form does not --validate.
set -euo pipefail
cd "$(dirname "$0")/.."
PEER_BIN=${1:-}
RK_BIN=${2:-target/release/ratekeeper}
DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
SCENARIOS=${SCENARIOS:-"spread flood"}
for tool in wrk redis-server redis-cli curl; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install wrk redis-server curl)" >&2; exit 1; }
done
[ -x "$RK_BIN" ] || { echo "$RK_BIN: build it first (cargo build --release)" >&2; exit 1; }
if [ -n "$PEER_BIN" ] && [ ! -x "$PEER_BIN" ]; then echo "$PEER_BIN is not an executable" >&2; exit 1; fi

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

cat > "$TMP/policies.toml" <<'TOML'
[policies.spread]
limits = [{ name = "all", algorithm = "fixed_window", limit = 1000000, window = "1s" }]

[policies.flood]
limits = [{ name = "all", algorithm = "fixed_window", limit = 100, window = "1s" }]
TOML
limits_file() { # variable
  printf -- '- namespace: spread\n  max_value: 1000000\n  seconds: 1\n  conditions: []\n  variables: ["%s"]\n' "$1"
  printf -- '- namespace: flood\n  max_value: 100\n  seconds: 1\n  conditions: []\n  variables: ["%s"]\n' "$1"
}

declare -A PORT PID
start() { # name command...
  local name=$1 port
  shift
  port=$(free_port)
  PORT_NOW=$port "$@" >"$TMP/$name.log" 2>&1 &
  PID[$name]=$!
  PORT[$name]=$port
  pids+=("${PID[$name]}")
}
rk() { # mode
  local batch=100us redis=(--redis-url "redis://127.0.0.1:$REDIS_PORT")
  case $1 in memory) redis=() ;; redis) batch=0us ;; esac
  RATEKEEPER_LOG__LEVEL=warn RATEKEEPER_REDIS__BATCH_WINDOW=$batch exec "$RK_BIN" serve \
    --listen "127.0.0.1:$PORT_NOW" --policies "$TMP/policies.toml" "${redis[@]}"
}
peer() { # storage
  local storage=(memory)
  [ "$1" = redis ] && storage=(redis "redis://127.0.0.1:$REDIS_PORT")
  exec "$PEER_BIN" --http-port "$PORT_NOW" --http-ip 127.0.0.1 --rls-port "$(free_port)" \
    --rls-ip 127.0.0.1 "$TMP/limits.yaml" "${storage[@]}"
}
TARGETS="rk-memory rk-redis rk-batched"
for mode in memory redis batched; do start "rk-$mode" rk "$mode"; done
if [ -n "$PEER_BIN" ]; then
  limits_file key > "$TMP/limits.yaml"
  if ! "$PEER_BIN" --validate "$TMP/limits.yaml" >/dev/null 2>&1; then
    limits_file 'descriptors[0].key' > "$TMP/limits.yaml"
    "$PEER_BIN" --validate "$TMP/limits.yaml" || { echo "the peer refuses both forms of the limits file" >&2; exit 1; }
  fi
  for storage in memory redis; do start "peer-$storage" peer "$storage"; done
  TARGETS="$TARGETS peer-memory peer-redis"
fi
ready() { # name: any HTTP answer on the port
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:${PORT[$1]}/" && return 0
    sleep 0.1
  done
  echo "$1 did not start; its log:" >&2; cat "$TMP/$1.log" >&2; exit 1
}
for name in $TARGETS; do ready "$name"; done

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis_ns() { awk '{print $1}' "/proc/$REDIS_PID/schedstat"; }
commands() {
  rcli info commandstats | tr -d '\r' | awk -F'[:=,]' \
    '/^cmdstat_/ && !/^cmdstat_(info|config)/ { c += $3 } END { print c + 0 }'
}

# One wrk run; prints rps server_us redis_us commands (per check).
measure() { # name scenario
  local name=$1 api=ratekeeper line cpu0 ns0 cpu1 ns1 cmds secs=${DURATION%s}
  [ "${name%%-*}" = peer ] && api=limitador
  rcli config resetstat >/dev/null
  cpu0=$(cpu_ticks "${PID[$name]}"); ns0=$(redis_ns)
  line=$(API=$api SCENARIO=$2 wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s bench/peer.lua \
    "http://127.0.0.1:${PORT[$name]}" | grep '^RESULT')
  cpu1=$(cpu_ticks "${PID[$name]}"); ns1=$(redis_ns); cmds=$(commands)
  case $line in *" bad=0") ;; *) echo "$name answered errors: $line" >&2; exit 1 ;; esac
  eval "${line#RESULT }"
  awk -v rps="$rps" -v t=$((cpu1 - cpu0)) -v hz="$TICKS" -v ns=$((ns1 - ns0)) -v c="$cmds" \
    -v s="$secs" -v mem="${name#*-}" 'BEGIN {
      n = rps * s
      r = (mem == "memory") ? 0 : ns / 1000 / n
      printf "%.0f %.2f %.2f %.3f\n", rps, t / hz * 1e6 / n, r, (mem == "memory") ? 0 : c / n }'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

OUT=bench/results/peers-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# ratekeeper and a peer, side by side, $(date -u +%F)"
  echo
  echo "$(nproc) cores shared by wrk, every server and redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2);"
  echo "$CONNECTIONS connections, wrk $DURATION per cell, targets interleaved, median of $ROUNDS rounds."
  echo "Produced by \`bash bench/peers.sh ${PEER_BIN:-(no peer)}\`."
  echo
  echo "| scenario | target | checks/s | server µs | Redis µs | Redis commands |"
  echo "|---|---|---|---|---|---|"
} > "$OUT"
for scenario in $SCENARIOS; do
  declare -A RES=()
  for _ in $(seq "$ROUNDS"); do
    for name in $TARGETS; do RES[$name]="${RES[$name]:-}|$(measure "$name" "$scenario")"; done
  done
  for name in $TARGETS; do
    row=""
    for col in 1 2 3 4; do
      row="$row | $(echo "${RES[$name]}" | tr '|' '\n' | grep -v '^$' | awk -v c=$col '{print $c}' | median)"
    done
    echo "| $scenario | $name$row |" | tee -a "$OUT"
  done
  unset RES
done
[ -n "$PEER_BIN" ] || echo "no PEER_BIN: ratekeeper's rows only" | tee -a "$OUT" >&2
echo "wrote $OUT" >&2
