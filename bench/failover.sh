#!/usr/bin/env bash
# Failover recovery times, Sentinel and Cluster. One command:
#
#   bash bench/failover.sh            # 3 runs of each, ~4 minutes
#   RUNS=5 DELAYS="200" bash bench/failover.sh
#
# Each run is one of the failover tests (tests/stores/sentinel.rs, tests/stores/cluster.rs):
# real redis-server processes on loopback, ratekeeper in-process, a bounded
# load of concurrent checks, one primary SIGKILLed. The test prints a
# `FAILOVER <kind> key=value...` line; this script collects those lines and
# writes min/median/max to bench/results/failover-<UTC time>.md.
#
# What the numbers mean (milliseconds from the SIGKILL):
#   promoted   the sentinels (or the cluster) name the replica as primary
#   recovered  first non-degraded answer to a check sent after the kill,
#              for the killed primary's keys
#   last_degraded  the last degraded answer for those keys
#   max_latency    the slowest answer of the whole run (any key)
#   other_degraded (cluster) degraded answers for keys on the other primaries
# Settings: redis.timeout 100ms (default), redis.reconnect_max_delay each of
# DELAYS (ms; 500 is the default, 200 what the tests use), Sentinel
# down-after-milliseconds 500, cluster-node-timeout 1000. The cluster test
# kills the node its URL names.
# Debug build: the times are Redis's and the client's, not CPU-bound.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
DELAYS=${DELAYS:-"200 500"}
command -v redis-server >/dev/null || { echo "redis-server is required (apt-get install redis-server)" >&2; exit 1; }
command -v redis-cli >/dev/null || { echo "redis-cli is required (apt-get install redis-server)" >&2; exit 1; }

cargo test --no-run --test stores >/dev/null 2>&1
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for delay in $DELAYS; do
for kind in sentinel cluster; do
  for run in $(seq "$RUNS"); do
    out=$(FAILOVER_RECONNECT_MAX_DELAY_MS=$delay cargo test -q --test stores "$kind::" -- --nocapture 2>&1) &&
      verdict=pass || verdict=FAIL
    line=$(grep -m1 "^FAILOVER $kind " <<<"$out" || true)
    if [ -z "$line" ]; then
      echo "$kind run $run: no FAILOVER line; test output follows" >&2
      echo "$out" | tail -20 >&2
      continue
    fi
    echo "$line test=$verdict" | tee -a "$lines"
  done
done
done

# min / median / max of one field over the runs of one kind and delay.
stats() {
  grep "^FAILOVER $1 reconnect_max_delay_ms=$delay " "$lines" | tr ' ' '\n' | sed -n "s/^$2=//p" | grep -v none | sort -n |
    awk '{v[NR]=$1} END {if (NR==0) {print "n/a"; exit} m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2;
         printf "%d / %d / %d", v[1], m, v[NR]}'
}

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=bench/results/failover-$stamp.md
{
  echo "# Failover recovery, $stamp"
  echo
  echo "\`bash bench/failover.sh\` with RUNS=$RUNS on $(nproc) cores, $(redis-server --version | cut -d' ' -f3)."
  echo "Milliseconds from the SIGKILL of a primary under load; min / median / max over the runs."
  echo
  echo "| | reconnect_max_delay | promoted | first non-degraded answer | last degraded answer | slowest answer | degraded answers, other primaries |"
  echo "|---|---|---|---|---|---|---|"
  for delay in $DELAYS; do
    for kind in sentinel cluster; do
      other=$( [ "$kind" = cluster ] && stats cluster other_degraded || echo "n/a (one primary)")
      echo "| $kind | ${delay} ms | $(stats $kind promoted_ms) | $(stats $kind recovered_ms) | $(stats $kind last_degraded_ms) | $(stats $kind max_latency_ms) | $other |"
    done
  done
  echo
  echo "Raw lines:"
  echo
  echo '```'
  cat "$lines"
  echo '```'
} >"$out"
cat "$out"
