# The Redis ceiling, sourced by bench/run.sh and bench/ceiling.sh: the check
# script exactly as ratekeeper calls it (FCALL of `ratekeeper script
# --function`, or EVALSHA of `ratekeeper script` for a build without it),
# with the arguments ratekeeper sends, at a given concurrency, no
# pipelining, over 100k random keys with every check allowed.
#
# Rows:
#   one:<algorithm>  one limit of <algorithm>, 100000 per minute
#   batch            BATCH_CHECKS (15) one-limit fixed_window checks in
#                    one call, as the micro-batcher sends them
#   two              two limits in one call: gcra 1000000/s (burst 1000000)
#                    and fixed_window 1000000000/day, the pair of the HTTP
#                    two-limit scenario; ÷ one:gcra is the Redis-side cost
#                    of the second limit (a dry pass, then the writes).
# redis-benchmark draws each __rand_int__ on its own, so the two keys of a
# `two` call carry different hash tags; on one server the tag changes
# nothing (ratekeeper's own keys share the client key's tag).
#
# Needs: BIN (ratekeeper binary), TMP, rcli(), REDIS_PORT. Sets
# CEILING[row,c] (calls/s), CEILING_P50[row,c] (µs, as the client saw it)
# and CEILING_US[row,c]: Redis's own time per call (commandstats
# usec_per_call of EVALSHA), which other load on the machine disturbs far
# less than throughput.
declare -A CEILING CEILING_P50 CEILING_US
# Checks per call of the `batch` row (the micro-batcher's calls carry about
# 15 at 64 connections: 0.067 calls per check in docs/benchmarks.md).
BATCH_CHECKS=${BATCH_CHECKS:-15}

ceiling_args() { # row -> numkeys keys... argv...
  local row=$1 tag i keys="" ops=""
  if [ "$row" = batch ]; then
    # BATCH_CHECKS one-limit fixed_window checks in one call, as the
    # micro-batcher sends them (each key drawn on its own).
    for i in $(seq "$BATCH_CHECKS"); do
      keys="$keys bench:{__rand_int__}:fw:60000"
      ops="$ops 1 1 1 '' '' fw 100000 60000000 100000"
    done
    echo "$BATCH_CHECKS$keys '' 0 ''$ops"
    return
  fi
  if [ "$row" = two ]; then
    # ARGV as src/store/redis/wire.rs writes it: now (''), padding, channel
    # (''), then one check operation (code 1) of 2 limits at cost 1, with
    # nothing to publish ('') and no lease ('').
    echo "2 bench:{__rand_int__}:gcra:1000 bench:{__rand_int__}:fw:86400000 '' 0 '' 1 2 1 '' ''" \
      "gcra 1000000 1000000 1000000 fw 1000000000 86400000000 1000000000"
    return
  fi
  # The algorithm tags (Algorithm::key_tag, generated into the script).
  case ${row#one:} in
    fixed_window) tag=fw;; sliding_window) tag=sw;; sliding_log) tag=sl2;;
    token_bucket) tag=tb;; gcra) tag=gcra;;
    *) echo "unknown algorithm ${row#one:}" >&2; exit 1;;
  esac
  echo "1 bench:{__rand_int__}:$tag:60000 '' 0 '' 1 1 1 '' '' $tag 100000 60000000 100000"
}

measure_ceiling() { # connections rows...
  local conns=$1; shift
  local sha row c n csv args reply call
  # As ratekeeper calls it: FCALL of its function library where the build
  # has one (`ratekeeper script --function`), else EVALSHA of the script.
  if "$BIN" script --function > "$TMP/library.lua" 2>/dev/null; then
    rcli -x function load replace < "$TMP/library.lua" >/dev/null
    call="FCALL $(head -1 "$TMP/library.lua" | sed 's/.*name=//')"
  else
    "$BIN" script > "$TMP/check.lua"
    sha=$(rcli -x script load < "$TMP/check.lua")
    call="EVALSHA $sha"
  fi
  CEILING_CALL=${call%% *}
  for row in "$@"; do
    args=$(ceiling_args "$row")
    # One call by hand first: redis-benchmark counts error replies as
    # answered, so a wrong argument list would pass for a fast one.
    reply=$(eval "rcli $call ${args//__rand_int__/probe}" | head -1)
    if [ "$reply" != 1 ]; then
      echo "ceiling $row: the check script answered '$reply', not an allowed check" >&2
      exit 1
    fi
    for c in $conns; do
      n=$(( c == 1 ? 30000 : 300000 ))
      rcli config resetstat >/dev/null
      csv=$(eval "redis-benchmark -h 127.0.0.1 -p $REDIS_PORT -c $c -n $n -r 100000 --csv $call $args" \
        | tail -1 | tr -d '"')
      CEILING[$row,$c]=$(echo "$csv" | cut -d, -f2 | cut -d. -f1)
      CEILING_P50[$row,$c]=$(echo "$csv" | awk -F, '{ printf "%d", $5 * 1000 }')
      CEILING_US[$row,$c]=$(rcli info commandstats | tr -d '\r' \
        | awk -F'usec_per_call=' '/^cmdstat_(evalsha|fcall):/ { split($2, v, ","); print v[1] }')
    done
  done
  rcli flushall >/dev/null
}

ceiling_label() { # row
  case $1 in
    two) echo "redis-benchmark check, 2 limits (gcra + fixed_window)";;
    batch) echo "redis-benchmark call of $BATCH_CHECKS checks, 1 limit fixed_window each";;
    *) echo "redis-benchmark check, 1 limit ${1#one:}";;
  esac
}
