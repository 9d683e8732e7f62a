#!/usr/bin/env bash
# Memory per key, both stores, for docs/algorithms.md's table.
# - Redis: runs the real scripts on its own redis-server for 100k distinct
#   keys per algorithm (limit 100 per minute, one check each; the sliding
#   log also with 10 entries per key), and reports used_memory growth per
#   key and MEMORY USAGE of one key.
# - Embedded store: RSS growth per key for 1M keys (examples/memory_per_key.rs).
# Writes bench/results/memory-<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
cargo build --release --locked --bin ratekeeper --example memory_per_key 2>&1 | tail -1 >&2
BIN=target/release/ratekeeper

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TMP=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
REDIS=$!
trap 'kill $REDIS 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli() { redis-cli -p "$PORT" "$@"; }
N=100000

OUT=bench/results/memory-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Memory per key, $(date -u +%F)"
  echo
  echo "Produced by \`bash bench/memory.sh\`. Keys like \`user:1234567\`; rule: limit 100 per minute."
  echo
  echo "## Redis $(redis-server --version | awk '{print $3}' | cut -d= -f2)"
  echo
  echo "| algorithm | state per key | used_memory growth per key ($N keys) | MEMORY USAGE of one key | encoding |"
  echo "|---|---|---|---|---|"
} > "$OUT"
# Buckets spend 50 of 100 so their keys live 30 s, longer than the measurement.
for spec in fixed_window:1 sliding_window:1 sliding_log:1 sliding_log:10 token_bucket:50 gcra:50; do
  algorithm=${spec%:*}; cost=${spec#*:}
  rcli flushall >/dev/null
  "$BIN" script "$algorithm" > "$TMP/script.lua"
  sha=$(rcli -x script load < "$TMP/script.lua")
  before=$(rcli info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}')
  # Every check pipelined through redis-cli: EVALSHA sha 1 key now limit window cost burst pad
  seq 0 $((N - 1)) | awk -v sha="$sha" -v cost="$cost" '{ printf "EVALSHA %s 1 rk:{user:%07d}:x:60000 \"\" 100 60000000 %d 100 0\n", sha, $1, cost }' \
    | rcli --pipe >/dev/null
  after=$(rcli info memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}')
  keys=$(rcli dbsize)
  one=$(rcli memory usage "rk:{user:0000000}:x:60000")
  enc=$(rcli object encoding "rk:{user:0000000}:x:60000")
  echo "| $algorithm | $cost unit(s) spent | $(( (after - before) / keys )) B | $one B | $enc |" >> "$OUT"
done
{
  echo
  echo "## Embedded store"
  echo
  target/release/examples/memory_per_key
} >> "$OUT"
cat "$OUT"
echo "written to $OUT" >&2
