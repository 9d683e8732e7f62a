#!/usr/bin/env bash
# ratekeeper side by side with a peer (Kuadrant/limitador's HTTP API), in the
# same scenarios, interleaved, in one run (issues 19 and 29):
#
#   bash bench/peers.sh PEER_BIN [RATEKEEPER_BIN]   # PEER_BIN: a limitador-server you built
#   bash bench/peers.sh                             # ratekeeper's rows alone
#
# limitador's source is on none of the registries this project reaches:
# docs/benchmarks.md says how to fetch and build it outside the project.
#
# Targets, each its own server on one shared redis-server:
#   rk-memory     ratekeeper, embedded store
#   rk-redis      ratekeeper on Redis, micro-batching off (redis.batch_window = 0us)
#   rk-batched    ratekeeper on Redis, micro-batching on (100us, the default)
#   peer-memory   limitador-server LIMITS memory
#   peer-redis    limitador-server LIMITS redis redis://...
# Scenarios (bench/peer.lua): spread (100k keys, all allowed) and flood (95 %
# of checks on one key over its limit), at $CONNECTIONS connections; then
# spread at one connection (c1), whose rows are read by their latency. Both
# servers get the same limits:
#   ratekeeper   policies spread (fixed_window 1000000/1s), flood (100/1s)
#                and proof (100/1d: a window whose end a proof hardly meets)
#   limitador    namespaces spread, flood and proof, same max_value and
#                seconds, one variable: the key
# and the same requests: POST /v1/check {"policy": P, "key": K} against
# POST /check_and_report {"namespace": P, "values": {"key": K}, "delta": 1}.
# A denial is 200 {"allowed": false} from ratekeeper, 429 from limitador.
#
# Before anything is measured, every target must prove that it limits: 105
# checks on one fresh key of the proof limit (100 a day) must get exactly
# 5 denials, or the script stops and says so; and in the flood, where 95 %
# of checks go to a key over its limit, each must deny at least half. A peer whose limits file
# matches no request counts nothing and would otherwise look fast.
#
# Columns per check: checks/s, the share of checks denied, the server's CPU
# (utime + stime), the redis-server main thread's CPU (schedstat), Redis
# commands per check (commandstats, every command but INFO and CONFIG, those
# a script runs included: limitador sends plain commands, ratekeeper one
# FCALL per call, which runs HMGET, HSET, ... inside), and wrk's p50 and
# p99 latency. The last table gives ratekeeper ÷ limitador: throughput at
# 64 connections, p50 at one.
#
# RK_WORKERS=N runs ratekeeper with N runtime worker threads
# (server.worker_threads; unset: one per core, the default). On a machine whose cores the load generator and Redis share,
# fewer workers mean fewer wake-ups between threads (docs/benchmarks.md).
#
# The limits file is written in limitador 2.x's form first (conditions and
# variables are CEL over `descriptors[0]`); 1.x's form (`variables: [key]`),
# which 2.x validates but matches to no request, only if 2.x's does not
# --validate.
set -euo pipefail
cd "$(dirname "$0")/.."
PEER_BIN=${1:-}
RK_BIN=${2:-target/release/ratekeeper}
DURATION=${DURATION:-4s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
SCENARIOS=${SCENARIOS:-"spread flood"}
RK_WORKERS=${RK_WORKERS:-}
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

[policies.proof]
limits = [{ name = "all", algorithm = "fixed_window", limit = 100, window = "1d" }]
TOML
limits_file() { # variable
  printf -- '- namespace: spread\n  max_value: 1000000\n  seconds: 1\n  conditions: []\n  variables: ["%s"]\n' "$1"
  printf -- '- namespace: flood\n  max_value: 100\n  seconds: 1\n  conditions: []\n  variables: ["%s"]\n' "$1"
  printf -- '- namespace: proof\n  max_value: 100\n  seconds: 86400\n  conditions: []\n  variables: ["%s"]\n' "$1"
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
  [ -z "$RK_WORKERS" ] || export RATEKEEPER_SERVER__WORKER_THREADS=$RK_WORKERS
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
  limits_file 'descriptors[0].key' > "$TMP/limits.yaml"
  if ! "$PEER_BIN" --validate "$TMP/limits.yaml" >/dev/null 2>&1; then
    limits_file key > "$TMP/limits.yaml"
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

# Proves that `name` limits: 105 checks on a fresh key of the proof limit
# (100 a day) are denied exactly 5 times. Sequential checks: this proves the
# counting, not the micro-batcher's path, which the flood's denials show.
prove() { # name
  local name=$1 key="proof-$RANDOM-$RANDOM" url body denied=0 answer
  if [ "${name%%-*}" = peer ]; then
    url="http://127.0.0.1:${PORT[$name]}/check_and_report"
    body="{\"namespace\":\"proof\",\"values\":{\"key\":\"$key\"},\"delta\":1}"
  else
    url="http://127.0.0.1:${PORT[$name]}/v1/check"
    body="{\"policy\":\"proof\",\"key\":\"$key\"}"
  fi
  for _ in $(seq 105); do
    answer=$(curl -s -w ' %{http_code}' -H 'content-type: application/json' -d "$body" "$url" || true)
    case $answer in
      *' 429' | *'"allowed":false'*) denied=$((denied + 1)) ;;
      *' 200') ;;
      *) echo "$name: unexpected answer to a proof check: $answer" >&2; exit 1 ;;
    esac
  done
  if [ "$denied" -ne 5 ]; then
    echo "$name does not limit: 105 checks on a limit of 100 got $denied denials, not 5; its numbers would measure nothing" >&2
    exit 1
  fi
  echo "$name limits: 105 checks on a limit of 100, 5 denied" >&2
}
for name in $TARGETS; do prove "$name"; done

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis_ns() { awk '{print $1}' "/proc/$REDIS_PID/schedstat"; }
commands() {
  rcli info commandstats | tr -d '\r' | awk -F'[:=,]' \
    '/^cmdstat_/ && !/^cmdstat_(info|config)/ { c += $3 } END { print c + 0 }'
}

# One wrk run; prints rps denied_share server_us redis_us commands p50_us
# p99_us (per check).
measure() { # name scenario connections
  local name=$1 api=ratekeeper line cpu0 ns0 cpu1 ns1 cmds secs=${DURATION%s}
  [ "${name%%-*}" = peer ] && api=limitador
  rcli config resetstat >/dev/null
  cpu0=$(cpu_ticks "${PID[$name]}"); ns0=$(redis_ns)
  line=$(API=$api SCENARIO=$2 wrk -t1 -c"$3" -d"$DURATION" -s bench/peer.lua \
    "http://127.0.0.1:${PORT[$name]}" | grep '^RESULT')
  cpu1=$(cpu_ticks "${PID[$name]}"); ns1=$(redis_ns); cmds=$(commands)
  case $line in *" bad=0") ;; *) echo "$name answered errors: $line" >&2; exit 1 ;; esac
  eval "${line#RESULT }"
  awk -v rps="$rps" -v denied="$denied" -v requests="$requests" -v p50="$p50_us" -v p99="$p99_us" -v t=$((cpu1 - cpu0)) -v hz="$TICKS" -v ns=$((ns1 - ns0)) -v c="$cmds" \
    -v s="$secs" -v mem="${name#*-}" 'BEGIN {
      n = rps * s
      r = (mem == "memory") ? 0 : ns / 1000 / n
      printf "%.0f %.3f %.2f %.2f %.3f %d %d\n", rps, (requests > 0) ? denied / requests : 0,
        t / hz * 1e6 / n, r, (mem == "memory") ? 0 : c / n, p50, p99 }'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

OUT=bench/results/peers-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# ratekeeper and a peer, side by side, $(date -u +%F)"
  echo
  echo "$(nproc) cores shared by wrk, every server and redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2);"
  echo "$CONNECTIONS connections, wrk $DURATION per cell, targets interleaved, median of $ROUNDS rounds."
  echo "Produced by \`${RK_WORKERS:+RK_WORKERS=$RK_WORKERS }bash bench/peers.sh ${PEER_BIN:-(no peer)}\`; ratekeeper's runtime workers: ${RK_WORKERS:-one per core}."
  echo
  echo "Every target first proved that it limits (105 checks on a limit of 100: exactly 5 denied)."
  echo
  echo "| scenario | target | checks/s | denied | server µs | Redis µs | Redis commands | p50 µs | p99 µs |"
  echo "|---|---|---|---|---|---|---|---|---|"
} > "$OUT"
declare -A MED=()
for cell in $(for s in $SCENARIOS; do echo "$s:$CONNECTIONS"; done) "${C1_SCENARIO:-spread}:1"; do
  scenario=${cell%:*} conns=${cell#*:}
  label=$scenario
  [ "$conns" = 1 ] && label="$scenario c1"
  declare -A RES=()
  for _ in $(seq "$ROUNDS"); do
    for name in $TARGETS; do RES[$name]="${RES[$name]:-}|$(measure "$name" "$scenario" "$conns")"; done
  done
  for name in $TARGETS; do
    row=""
    for col in 1 2 3 4 5 6 7; do
      value=$(echo "${RES[$name]}" | tr '|' '\n' | grep -v '^$' | awk -v c=$col '{print $c}' | median)
      MED["$label/$name/$col"]=$value
      row="$row | $value"
    done
    echo "| $label | $name$row |" | tee -a "$OUT"
    if [ "$scenario" = flood ] && awk -v d="${MED[$label/$name/2]}" 'BEGIN { exit !(d < 0.5) }'; then
      echo "$name denied ${MED[$label/$name/2]} of the flood's checks, 95 % of which are over their limit: it does not limit under load" >&2
      exit 1
    fi
  done
  unset RES
done
if [ -n "$PEER_BIN" ]; then
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
  {
    echo
    echo "| ratekeeper ÷ limitador | what | ratio |"
    echo "|---|---|---|"
    for scenario in $SCENARIOS; do
      for pair in rk-memory:peer-memory rk-redis:peer-redis rk-batched:peer-redis; do
        a=${pair%:*} b=${pair#*:}
        echo "| $scenario, $CONNECTIONS connections | $a ÷ $b, checks/s | $(ratio "${MED[$scenario/$a/1]:-0}" "${MED[$scenario/$b/1]:-0}") |"
      done
    done
    c1="${C1_SCENARIO:-spread} c1"
    for pair in rk-memory:peer-memory rk-redis:peer-redis rk-batched:peer-redis; do
      a=${pair%:*} b=${pair#*:}
      echo "| $c1 | $a ÷ $b, p50 latency | $(ratio "${MED[$c1/$a/6]:-0}" "${MED[$c1/$b/6]:-0}") |"
    done
  } | tee -a "$OUT"
fi
[ -n "$PEER_BIN" ] || echo "no PEER_BIN: ratekeeper's rows only" | tee -a "$OUT" >&2
echo "wrote $OUT" >&2
