#!/usr/bin/env bash
# What TLS on ratekeeper's own HTTP listener costs (issue 31): one build,
# two instances on the embedded store, one plaintext and one with
# [server.tls] (ECDSA P-256, TLS 1.3), measured in one run:
# - keep-alive: wrk, CONNECTIONS connections, spread scenario (every check
#   allowed); checks/s and the server's CPU per check (utime + stime of the
#   process over the cell, divided by the checks);
# - new connections: NEW_RATE connections a second, each one check and
#   closed (a Python client: a full TCP and TLS handshake per check, the
#   way a client without keep-alive behaves); the server's CPU per check.
# Plain and TLS alternate, ROUNDS times; the median goes in the table.
#
#   bash bench/listener_tls.sh [BINARY]     (default target/release/ratekeeper)
#
# Writes bench/results/listener-tls-<UTC time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/ratekeeper}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
NEW_RATE=${NEW_RATE:-64}
for tool in wrk curl openssl python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install -y $tool)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TMP=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

# A CA and a server certificate for 127.0.0.1 (no client certificates).
source bench/certs_lib.sh
server_certs "$TMP"

declare -A PORT PID SCHEME
start() { # name scheme [env...]
  local name=$1; SCHEME[$name]=$2; shift 2
  PORT[$name]=$(free_port)
  env RATEKEEPER_LOG__LEVEL=warn "$@" "$BIN" serve --listen "127.0.0.1:${PORT[$name]}" \
    >"$TMP/$name.log" 2>&1 &
  PID[$name]=$!
  pids+=($!)
}
start plain http
start tls https RATEKEEPER_SERVER__TLS__CERT_FILE="$TMP/server.crt" \
  RATEKEEPER_SERVER__TLS__KEY_FILE="$TMP/server.key"
for name in plain tls; do
  url="${SCHEME[$name]}://127.0.0.1:${PORT[$name]}/readyz"
  for _ in $(seq 100); do curl -sf --cacert "$TMP/ca.crt" "$url" >/dev/null && break; sleep 0.1; done
  curl -sf --cacert "$TMP/ca.crt" "$url" >/dev/null || { cat "$TMP/$name.log"; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

keepalive() { # name -> checks/s and server µs per check
  local name=$1 before after line
  before=$(cpu_ticks "${PID[$name]}")
  line=$(SCENARIO=spread ALGORITHM=sliding_window wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
    -s bench/scenario.lua "${SCHEME[$name]}://127.0.0.1:${PORT[$name]}" | grep '^RESULT')
  after=$(cpu_ticks "${PID[$name]}")
  eval "${line#RESULT }"
  # A cell of errors measures nothing: no table is written (see below).
  [ "$errors" = 0 ] || { echo "$name: $errors of $requests keep-alive checks failed" >&2; touch "$TMP/failed"; }
  awk -v r="$rps" -v n="$requests" -v t=$((after - before)) -v hz="$TICK" \
    'BEGIN { printf "%.0f %.1f\n", r, n ? t / hz * 1e6 / n : 0 }'
}

# NEW_RATE connections a second for DURATION s, each one POST /v1/check
# and closed; prints the checks answered 200 and the failures.
cat >"$TMP/new_connections.py" <<'PY'
import http.client, ssl, sys, threading, time
scheme, port, rate, seconds, ca = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
context = ssl.create_default_context(cafile=ca) if scheme == "https" else None
ok = failed = 0
lock = threading.Lock()
def one(i):
    global ok, failed
    try:
        if context:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        body = '{"key":"new-%d","limit":1000000,"window":"1h"}' % i
        conn.request("POST", "/v1/check", body, {"content-type": "application/json", "connection": "close"})
        good = conn.getresponse().status == 200
        conn.close()
    except Exception:
        good = False
    with lock:
        if good: ok += 1
        else: failed += 1
threads, start = [], time.monotonic()
for i in range(int(rate * seconds)):
    time.sleep(max(0, start + i / rate - time.monotonic()))
    t = threading.Thread(target=one, args=(i,)); t.start(); threads.append(t)
for t in threads: t.join()
print(ok, failed)
PY
fresh() { # name -> server µs per check
  local name=$1 before after ok failed
  before=$(cpu_ticks "${PID[$name]}")
  read -r ok failed < <(python3 "$TMP/new_connections.py" "${SCHEME[$name]}" "${PORT[$name]}" \
    "$NEW_RATE" "$DURATION" "$TMP/ca.crt")
  after=$(cpu_ticks "${PID[$name]}")
  [ "$failed" = 0 ] || { echo "$name: $failed of $((ok + failed)) new-connection checks failed" >&2; touch "$TMP/failed"; }
  awk -v n="$ok" -v t=$((after - before)) -v hz="$TICK" 'BEGIN { printf "%.1f\n", n ? t / hz * 1e6 / n : 0 }'
}
median() { tr ' ' '\n' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

declare -A RPS CPU NEW
for _ in $(seq "$ROUNDS"); do
  for name in plain tls; do
    read -r r c < <(keepalive "$name"); RPS[$name]+="$r "; CPU[$name]+="$c "
    NEW[$name]+="$(fresh "$name") "
  done
done
# The cells run in subshells: a failed one leaves a mark, and stops here.
[ ! -e "$TMP/failed" ] || { echo "some checks failed: no result written" >&2; exit 1; }
m() { echo "$1" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a ? b / a : 0 }'; }
OUT=bench/results/listener-tls-$(date -u +%Y%m%dT%H%M%SZ).md
pr=$(m "${RPS[plain]}") tr_=$(m "${RPS[tls]}") pc=$(m "${CPU[plain]}") tc=$(m "${CPU[tls]}")
pn=$(m "${NEW[plain]}") tn=$(m "${NEW[tls]}")
{
  echo "# TLS on the HTTP listener against plaintext, $(date -u +%F)"
  echo
  echo "\`$BIN\`, embedded store, $(nproc) cores shared by the clients and both instances; ECDSA"
  echo "P-256 certificate, no client certificate. Median of $ROUNDS rounds, plain and TLS"
  echo "alternating, ${DURATION} s per cell. Produced by \`bash bench/listener_tls.sh\`."
  echo
  echo "| load | plain | TLS | TLS / plain |"
  echo "|---|---|---|---|"
  echo "| $CONNECTIONS keep-alive connections (wrk): checks/s | $pr | $tr_ | $(ratio "$pr" "$tr_") |"
  echo "| $CONNECTIONS keep-alive connections: server CPU µs per check | $pc | $tc | $(ratio "$pc" "$tc") |"
  echo "| $NEW_RATE new connections a second, one check each: server CPU µs per check | $pn | $tn | $(ratio "$pn" "$tn") |"
} | tee "$OUT"
echo "wrote $OUT" >&2
