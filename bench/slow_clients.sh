#!/usr/bin/env bash
# Slow-client attack on loopback: CONNECTIONS slow connections (idle,
# trickled headers, trickled body, idle keep-alive; reopened when closed)
# for DURATION seconds, then DRAIN seconds of quiet. Every 5 s it records
# the service's open client connections (descriptors that are sockets),
# its RSS, and the time of one check from a well-behaved client.
#
#   bench/slow_clients.sh [BINARY] [CONNECTIONS] [DURATION] [DRAIN]
#
# Defaults: target/debug/ratekeeper, 19000 (the attacker and the service
# each need a descriptor per connection; the hard limit here is 20000), 90 s,
# 20 s. The service runs with its default [server] settings.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/debug/ratekeeper}
CONNECTIONS=${2:-19000}
DURATION=${3:-90}
DRAIN=${4:-20}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

ulimit -n "$(ulimit -Hn)"
env -u RATEKEEPER_CONFIG RATEKEEPER_LOG__LEVEL=warn "$BIN" serve --listen "127.0.0.1:$PORT" >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; kill $ATTACKER 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

sample() {
  local sockets rss check
  sockets=$( (find /proc/$PID/fd -lname 'socket:*' 2>/dev/null || true) | wc -l)
  rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' /proc/$PID/status 2>/dev/null || echo gone)
  check=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 3 \
    -H 'content-type: application/json' -d '{"key":"bench","limit":1000000,"window":"1m"}' \
    "http://127.0.0.1:$PORT/v1/check" || true)
  printf '%5s  %7s  %6s  %s\n' "$1" "$sockets" "$rss" "$check"
}

echo "binary: $BIN; $CONNECTIONS slow connections for ${DURATION}s, then ${DRAIN}s quiet"
echo "    t  sockets  RSS_MB  check(status seconds)"
sample 0
python3 bench/slow_clients.py 127.0.0.1 "$PORT" "$CONNECTIONS" "$DURATION" &
ATTACKER=$!
START=$(date +%s)
END=$((START + DURATION + DRAIN))
while [ "$(date +%s)" -lt "$END" ]; do
  sleep 5
  sample $(( $(date +%s) - START ))
done
wait $ATTACKER || true
