#!/usr/bin/env bash
# What the heavy-hitters sketches (GET /v1/top) cost a check, counted in
# instructions, which a noisy 2-core machine does not disturb:
#
#   bash bench/top_cost.sh [BINARY]      (default target/release/ratekeeper)
#
# Runs BINARY under valgrind's callgrind twice per traffic shape, with the
# sketches off (top.capacity = 0) and on (the default), while one client
# sends N checks over one keep-alive connection: "spread" (every check a
# new key: the sketch's costliest path, a replacement) and "hot" (95 % one
# key). Reports instructions per check of the whole program (startup
# included, the same in both) and their difference, and the sketch's own
# (Top::observe, inclusive). Writes bench/results/top_cost-<UTC time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/ratekeeper}
N=${N:-5000}
for tool in valgrind callgrind_annotate python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install valgrind python3)" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'pkill -INT -f "ratekeeper-top-cost" 2>/dev/null || true; rm -rf "$TMP"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

cat > "$TMP/drive.py" <<'PY'
import http.client, json, sys
port, n, shape = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port)
for i in range(n):
    key = f"k{i}" if shape == "spread" or i % 20 == 0 else "hot"
    body = json.dumps({"key": key, "limit": 1000000, "window": "1s"})
    c.request("POST", "/v1/check", body, {"content-type": "application/json"})
    c.getresponse().read()
PY

# run SHAPE CAPACITY -> "total observe" instruction counts
run() {
  local out="$TMP/cg.$1.$2"
  # The argv[0] marker lets the trap find it; callgrind writes on SIGINT.
  RATEKEEPER_TOP__CAPACITY=$2 RATEKEEPER_LOG__LEVEL=warn \
    valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" serve --listen "127.0.0.1:$PORT" \
    >"$TMP/log.$1.$2" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null && break
    sleep 0.1
  done
  python3 "$TMP/drive.py" "$PORT" "$N" "$1"
  kill -INT "$pid"; wait "$pid" || true
  local total observe
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  observe=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null \
    | awk '/Top::observe/ { gsub(",", "", $1); print $1; exit }')
  echo "$total ${observe:-0}"
}

OUT=bench/results/top_cost-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# The heavy-hitters sketches' cost per check, $(date -u +%F)"
  echo
  echo "\`$BIN\` under callgrind, $N checks over one keep-alive connection per cell, embedded store;"
  echo "instructions per check (program totals over N, startup included). Produced by \`bash bench/top_cost.sh\`."
  echo
  echo "| traffic | sketches off | sketches on | on / off | Top::observe per check |"
  echo "|---|---|---|---|---|"
} > "$OUT"
for shape in spread hot; do
  read -r off _ < <(run "$shape" 0)
  read -r on observe < <(run "$shape" 128)
  awk -v s="$shape" -v off="$off" -v on="$on" -v ob="$observe" -v n="$N" 'BEGIN {
    printf "| %s | %d | %d | %.4f | %d |\n", s, off / n, on / n, on / off, ob / n }' | tee -a "$OUT"
done
echo "wrote $OUT" >&2
