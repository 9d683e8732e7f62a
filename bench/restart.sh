#!/usr/bin/env bash
# A Redis restart under load (issue 6, defect 5): one limiter failing
# closed, two pool connections, about 10 000 checks/s from 48 callers; its
# redis-server is killed and started again on the same port (empty data,
# empty script cache). Counts the answers given by the failure policy after
# the new server answered, on the direct path (batch_window = 0) and the
# batched one (100us), RESTART_ROUNDS restarts each (default 10): started
# again at once, and after 300 and 600 ms down (long enough to open the
# breaker before and after the change to its counting).
# Usage: bash bench/restart.sh [label]   (label goes into the file name)
# Writes bench/results/restart[-label]-<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
LABEL=${1:+-$1}
OUT=bench/results/restart$LABEL-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Degraded answers after a Redis restart, direct and batched, $(date -u +%F)"
  echo
  echo "Produced by \`bash bench/restart.sh ${1:-}\` at commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo ' (with uncommitted changes in src/)')"
  echo "(\`tests/faults/restart.rs\`, \`restart_recovery_numbers\`). Fail-closed, default [redis] and"
  echo "[breaker] settings (timeout 100ms, open_for 1s), pool_size 2, $(nproc) cores."
  echo "\"down\" ends when the new server answers the harness's PING (polled every 20 ms);"
  echo "times after it are from that moment."
  echo
} > "$OUT"
for DOWN in ${RESTART_DOWNS:-0 300 600}; do
  RESTART_DOWN_MS=$DOWN RESTART_OUT="$OUT.body" cargo test --locked --test faults restart::restart_recovery_numbers -- --ignored --exact --nocapture >/dev/null
  cat "$OUT.body" >> "$OUT"
  rm -f "$OUT.body"
done
grep '^- \*\*' "$OUT"
