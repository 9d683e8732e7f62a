#!/usr/bin/env bash
# The breaker's cost per check (issue 6 review, hot path): admit + record of
# a successful check, 1M pairs on each of 2 threads sharing one breaker
# (domain 0: a single Redis server; domain 7: a cluster node, through the
# map). The ignored test `tests/faults/breaker_bench.rs`, in release, ROUNDS times
# (default 5). Noisy on a shared machine: compare medians, and run a
# "before" build in the same minutes.
# Usage: bash bench/breaker_hot_path.sh [label]
# Writes bench/results/breaker_hot_path[-label]-<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
LABEL=${1:+-$1}
OUT=bench/results/breaker_hot_path$LABEL-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Breaker admit+record per check, 2 threads x 1M, $(date -u +%F)"
  echo
  echo "Produced by \`bash bench/breaker_hot_path.sh ${1:-}\` at commit $(git rev-parse --short HEAD), release, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)."
  echo
  echo '```'
} > "$OUT"
for _ in $(seq "${ROUNDS:-5}"); do
  cargo test --locked --release --test faults breaker_bench -- --ignored --nocapture 2>/dev/null | grep '^domain' >> "$OUT"
done
echo '```' >> "$OUT"
echo "$OUT"
