#!/usr/bin/env bash
# Exactness under one slow call (issue 6, defect 2): two instances (two
# limiters, each with its own Redis connections) share one real
# redis-server; 400 concurrent checks on one key with limit 100, failing
# open, and exactly one call of the first instance fails with a timeout.
# 100 rounds (the five algorithms in turn, the failed call at a different
# place in the burst each round). A round is exact when Redis admitted 100
# and only the injected check was answered by the policy.
# Writes bench/results/exactness-<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
OUT=bench/results/exactness-$(date -u +%Y%m%dT%H%M%SZ).md
{
  echo "# Exactness of 400 concurrent checks, limit 100, one injected timeout, $(date -u +%F)"
  echo
  echo "Produced by \`bash bench/exactness.sh\` at commit $(git rev-parse --short HEAD)"
  echo "(\`tests/faults/breaker.rs\`, \`exactness_over_100_rounds\`). Two instances, fail-open,"
  echo "deny cache off, batching on (100us), $(nproc) cores."
  echo
} > "$OUT"
EXACTNESS_OUT="$OUT.body" cargo test --locked --test faults breaker::exactness_over_100_rounds -- --ignored --exact --nocapture >/dev/null
cat "$OUT.body" >> "$OUT"
rm -f "$OUT.body"
head -8 "$OUT"
