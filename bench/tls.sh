#!/usr/bin/env bash
# What TLS to Redis costs a check: one redis-server with a plaintext and a
# TLS port, and four instances of one build against it: plaintext and TLS,
# each batched (the default batch_window) and unbatched (0us). wrk drives
# each in turn, ROUNDS times (plain then TLS alternating), spread scenario
# (every check allowed, so every check reaches Redis), CONNECTIONS
# connections; the median of the rounds goes in the table.
#
#   bash bench/tls.sh [BINARY]      (default target/release/ratekeeper)
#
# Writes bench/results/tls-<UTC time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/ratekeeper}
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
ALGORITHM=${ALGORITHM:-sliding_window}
CONNECTIONS=${CONNECTIONS:-64}
for tool in wrk redis-server curl openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

# A CA and a server certificate for 127.0.0.1 (no client certificates).
source bench/certs_lib.sh
server_certs "$TMP"

PLAIN=$(free_port) TLS=$(free_port)
redis-server --port "$PLAIN" --tls-port "$TLS" --bind 127.0.0.1 --save '' --appendonly no \
  --tls-cert-file "$TMP/server.crt" --tls-key-file "$TMP/server.key" \
  --tls-ca-cert-file "$TMP/ca.crt" --tls-auth-clients no --dir "$TMP" >/dev/null &
pids+=($!)

declare -A PORT
start() { # name url batch_window [env...]
  local name=$1 url=$2 window=$3; shift 3
  PORT[$name]=$(free_port)
  env RATEKEEPER_LOG__LEVEL=warn RATEKEEPER_REDIS__BATCH_WINDOW="$window" "$@" \
    "$BIN" serve --listen "127.0.0.1:${PORT[$name]}" --redis-url "$url" >"$TMP/$name.log" 2>&1 &
  pids+=($!)
}
for window in 100us 0us; do
  start "plain-$window" "redis://127.0.0.1:$PLAIN" "$window"
  start "tls-$window" "rediss://127.0.0.1:$TLS" "$window" RATEKEEPER_REDIS__TLS__CA_FILE="$TMP/ca.crt"
done
for name in "${!PORT[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[$name]}/readyz" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:${PORT[$name]}/readyz" >/dev/null || { cat "$TMP/$name.log"; exit 1; }
done

rps() { # name -> checks/s and p50 µs
  local line
  line=$(SCENARIO=spread ALGORITHM=$ALGORITHM wrk -t1 -c"$CONNECTIONS" -d"$DURATION" \
    -s bench/scenario.lua "http://127.0.0.1:${PORT[$1]}" | grep '^RESULT')
  eval "${line#RESULT }"
  echo "$rps $p50_us"
}
median() { tr ' ' '\n' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

OUT=bench/results/tls-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# TLS to Redis against plaintext, $(date -u +%F)"
  echo
  echo "\`$BIN\`; one redis-server 7.0 with a plaintext and a TLS port (ECDSA P-256 certificate, no"
  echo "client certificate); $(nproc) cores shared by wrk, four instances and redis-server. wrk"
  echo "${DURATION} per cell, $CONNECTIONS connections, spread scenario ($ALGORITHM, every check allowed),"
  echo "plain and TLS alternating, median of $ROUNDS rounds. Produced by \`bash bench/tls.sh\`."
  echo
  echo "| batching | plain checks/s | TLS checks/s | TLS / plain | plain p50 µs | TLS p50 µs |"
  echo "|---|---|---|---|---|---|"
} >"$OUT"
for window in 100us 0us; do
  pr=() tr_=() pp=() tp=()
  for _ in $(seq "$ROUNDS"); do
    read -r r p < <(rps "plain-$window"); pr+=("$r"); pp+=("$p")
    read -r r p < <(rps "tls-$window"); tr_+=("$r"); tp+=("$p")
  done
  a=$(echo "${pr[*]}" | median); b=$(echo "${tr_[*]}" | median)
  ap=$(echo "${pp[*]}" | median); bp=$(echo "${tp[*]}" | median)
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a ? b / a : 0 }')
  label="batch_window $window"
  echo "| $label | $a | $b | $ratio | $ap | $bp |" | tee -a "$OUT"
done
echo "wrote $OUT" >&2
