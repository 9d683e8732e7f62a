#!/usr/bin/env bash
# ratekeeper-acquire.sh: take one unit of a ratekeeper policy before a cron
# job or a batch step, waiting for it up to --wait (ratekeeper's wait_ms:
# the service holds the request until a unit frees up, or answers the
# denial at once when none can free up in time).
#
#   ratekeeper-acquire.sh -p export -k nightly-export               # then exit 0, 75 or 69
#   ratekeeper-acquire.sh -p export -k nightly-export -- ./export.sh --full
#
# With a command after `--`, the command is run (exec'd, so its exit status
# is the script's) only when the unit was granted or the fallback allows.
#
# Exit status:
#   0   granted (or failing open); with a command: the command's own status
#   75  denied: no unit within --wait (EX_TEMPFAIL: try again later);
#       stderr says when
#   69  no decision and failing closed (EX_UNAVAILABLE): ratekeeper
#       unreachable, no answer in time, a 5xx, or a refusal of our request
#       (401/403: token missing or wrong; 422: unknown policy or --wait over
#       the service's limits.max_wait)
#   64  bad arguments (EX_USAGE)
#
# Environment (options win):
#   RATEKEEPER_URL           http://127.0.0.1:8080
#   RATEKEEPER_POLICY        -p, required
#   RATEKEEPER_KEY           -k, default host:<hostname>
#   RATEKEEPER_COST          -c, default 1
#   RATEKEEPER_WAIT_MS       -w, default 5000 (the service refuses more than
#                            its limits.max_wait, 10000 by default)
#   RATEKEEPER_TIMEOUT_MS    time allowed beyond the wait: to connect, and
#                            for the answer after wait_ms; default 1000
#   RATEKEEPER_FAILURE_MODE  closed (default: a batch job can run later) or
#                            open (run anyway when ratekeeper gives no decision)
#   RATEKEEPER_TOKEN_FILE    a file holding a bearer token (scope check), or
#   RATEKEEPER_TOKEN         the token itself. Either way it is handed to curl
#                            on its standard input, never on a command line
#                            (which `ps` shows), and never printed.
set -euo pipefail

me=ratekeeper-acquire
usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
  exit 0
}
fail_usage() {
  echo "$me: $1 (see --help)" >&2
  exit 64
}

url=${RATEKEEPER_URL:-http://127.0.0.1:8080}
policy=${RATEKEEPER_POLICY:-}
key=${RATEKEEPER_KEY:-host:$HOSTNAME}
cost=${RATEKEEPER_COST:-1}
wait_ms=${RATEKEEPER_WAIT_MS:-5000}
timeout_ms=${RATEKEEPER_TIMEOUT_MS:-1000}
mode=${RATEKEEPER_FAILURE_MODE:-closed}

while [ $# -gt 0 ]; do
  case $1 in
    -p | --policy | -k | --key | -c | --cost | -w | --wait)
      [ $# -ge 2 ] || fail_usage "$1 needs a value"
      case $1 in
        -p | --policy) policy=$2 ;;
        -k | --key) key=$2 ;;
        -c | --cost) cost=$2 ;;
        *) wait_ms=$2 ;;
      esac
      shift 2
      ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) fail_usage "unknown argument: $1" ;;
  esac
done

[ -n "$policy" ] || fail_usage "no policy: give -p NAME or RATEKEEPER_POLICY"
for number in "cost=$cost" "wait=$wait_ms" "RATEKEEPER_TIMEOUT_MS=$timeout_ms"; do
  case ${number#*=} in
    '' | *[!0-9]*) fail_usage "${number%%=*} must be a whole number, got '${number#*=}'" ;;
  esac
done
case $mode in
  open | closed) ;;
  *) fail_usage "RATEKEEPER_FAILURE_MODE must be open or closed, got '$mode'" ;;
esac
for tool in curl jq; do
  command -v "$tool" >/dev/null || fail_usage "$tool is missing (Debian: apt-get install $tool)"
done

# Granted: run the command in our place, or report success.
granted() {
  if [ $# -gt 0 ]; then exec "$@"; fi
  exit 0
}

# No decision from ratekeeper: the fallback, said on stderr (which cron mails).
no_decision() {
  local level=$1 why=$2
  shift 2
  if [ "$mode" = open ]; then
    echo "$me: $level: ratekeeper at $url $why; failing open (RATEKEEPER_FAILURE_MODE=open)" >&2
    granted "$@"
  fi
  echo "$me: $level: ratekeeper at $url $why; failing closed (exit 69)" >&2
  exit 69
}

seconds() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

token=""
if [ -n "${RATEKEEPER_TOKEN_FILE:-}" ]; then
  token=$(tr -d ' \t\r\n' <"$RATEKEEPER_TOKEN_FILE") ||
    no_decision ERROR "cannot be asked: RATEKEEPER_TOKEN_FILE is unreadable" "$@"
elif [ -n "${RATEKEEPER_TOKEN:-}" ]; then
  token=$RATEKEEPER_TOKEN
fi
curl_config=""
if [ -n "$token" ]; then curl_config="header = \"Authorization: Bearer $token\""; fi

body=$(jq -cn --arg p "$policy" --arg k "$key" --argjson c "$cost" --argjson w "$wait_ms" \
  '{policy: $p, key: $k, cost: $c, wait_ms: $w}')
status=0
# printf is a shell builtin: the token goes through a pipe, not an argv.
response=$(printf '%s\n' "$curl_config" | curl --silent --config - \
  --connect-timeout "$(seconds "$timeout_ms")" --max-time "$(seconds $((wait_ms + timeout_ms)))" \
  -H 'Content-Type: application/json' --data "$body" \
  --write-out '\n%{http_code}' "${url%/}/v1/check") || status=$?

case $status in
  0) ;;
  7) no_decision WARNING "is unreachable (connection refused)" "$@" ;;
  28) no_decision WARNING "gave no answer within $((wait_ms + timeout_ms)) ms" "$@" ;;
  *) no_decision WARNING "is unreachable (curl exit $status)" "$@" ;;
esac
code=${response##*$'\n'}
answer=${response%$'\n'*}
if [ "$code" -ge 500 ]; then
  no_decision WARNING "answered $code" "$@"
elif [ "$code" != 200 ]; then
  # 401/403 (token missing, wrong or revoked), 422 (unknown policy, --wait
  # too long): our configuration is wrong, not a denial of this job.
  error=$(jq -r '.error.code // empty' <<<"$answer" 2>/dev/null || true)
  hint="fix RATEKEEPER_TOKEN_FILE / RATEKEEPER_TOKEN, the policy or --wait"
  no_decision ERROR "refused our check with $code${error:+ ($error)}: $hint" "$@"
fi

# One jq for both fields: every process counts against a short timeout.
decision=$(jq -r '"\(.allowed) \(.retry_after_ms // 1000)"' <<<"$answer" 2>/dev/null) ||
  no_decision WARNING "answered 200 with a body that is not JSON" "$@"
read -r allowed retry_ms <<<"$decision"
if [ "$allowed" = true ]; then granted "$@"; fi
# Seconds rounded up, as ratekeeper's own Retry-After: never early.
retry=$(((retry_ms + 999) / 1000))
echo "$me: denied by policy '$policy' for key '$key': retry after $((retry > 0 ? retry : 1)) s" >&2
exit 75
