#!/usr/bin/env bash
# What a check costs, counted where a noisy 2-core machine does not disturb
# the count: ratekeeper's instructions under valgrind's callgrind, and the
# script's own time inside Redis (commandstats). Each row is a binary and a
# rule; the first row of each store is the baseline of the `×` columns.
#
#   bash bench/cost.sh                         # a calendar day against a fixed 1d window
#   RULES="sliding gcra" bash bench/cost.sh OLD_BINARY NEW_BINARY   # two builds
#
# Rules (distinct keys, nothing denied):
#   fixed     {"limit": 1000000, "window": "1d", "algorithm": "fixed_window"}
#   calendar  {"limit": 1000000, "calendar": "day", "timezone": "Europe/Berlin"}
#   sliding   {"limit": 1000000, "window": "1s"}
#   gcra      {"limit": 1000000, "window": "1s", "algorithm": "gcra"}
#   acquire   {"limit": 10000, "algorithm": "concurrency", "lease_ttl": "1m"}:
#             an acquire alone (the lease expires unreleased)
#   lease     the same, each check followed by POST /v1/release of its
#             lease: one row is an acquire plus its release
#   two       gcra 1000000/1s and fixed_window 1000000000/1d inline, the
#             two-limit shape of bench/scenario.lua (SHAPE=two)
#   reserve   fixed with "reservation_ttl": "10m": a check that asks for a
#             reservation (POST /v1/settle); a build without reservations
#             ignores the field, so its row is a plain fixed check
#
#   policy    the policy form, {"policy": "fixed", "key": K}: the policy
#             `fixed` holds the `fixed` rule (a policy check against the
#             same limit inline)
#
#   batch     fixed, 10 checks at a time in POST /v1/checks: a row is one
#             check of a batch (N/10 requests)
#
#   levels    three levels of the fixed rule, each on its own key
#             ({"levels": [org, team, user]}, docs/budgets.md): one check
#             spending on three keys, against `fixed` on one
#   plevels   three levels of the policy `fixed`, each on its own key
#             ({"levels": [{"policy": "fixed", "key": ...}, ...]})
#   hierarchy the policy `tree`, which names those three levels with key
#             templates, by its ids ({"policy": "tree", "ids": {...}}):
#             against `plevels`, what building the keys from ids costs
#   draw      `reserve`, then one POST /v1/draw of 1 on its reservation:
#             a row is a reserving check plus a draw, so the draw's own
#             cost is this row less `reserve`'s
#
#   RULES="fixed acquire lease" bash bench/cost.sh   # leases against a fixed window
#   STORES=memory bash bench/cost.sh ...          # one store only
#   bash bench/cost.sh BIN "BIN@OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"  # traces on
#             (a binary followed by @VAR=value: that run's variables)
# For each store (embedded; Redis), binary and rule, one client sends N
# checks over one keep-alive connection to the binary running under
# callgrind; the row reports its instructions per check (startup included,
# the same in every row) and, on Redis, FCALL's (EVALSHA's) total usec over N (Redis's
# clock, not valgrind's): a check's script time, or for `lease` the
# acquire's and the release's together. Writes bench/results/cost-<UTC time>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BINARIES=("${@:-target/release/ratekeeper}")
RULES=${RULES:-"fixed calendar"}
N=${N:-5000}
for tool in valgrind callgrind_annotate python3 redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install valgrind python3 redis-server)" >&2; exit 1; }
done
TMP=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(free_port)
cat > "$TMP/policies.toml" <<'TOML'
[policies.fixed]
limits = [{ name = "day", algorithm = "fixed_window", limit = 1000000, window = "1d" }]

[policies.tree]
levels = [
  { name = "org", policy = "fixed", key = "org:{org}" },
  { name = "team", policy = "fixed", key = "team:{org}/{team}" },
  { name = "user", policy = "fixed", key = "user:{user}" },
]
TOML
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" >/dev/null &
REDIS_PID=$!
trap 'kill $REDIS_PID 2>/dev/null || true; pkill -INT -f "ratekeeper-calendar-cost" 2>/dev/null || true; rm -rf "$TMP"' EXIT
PORT=$(free_port)

cat > "$TMP/drive.py" <<'PY'
import http.client, json, sys
port, n, rule = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rules = {
    "fixed": {"limit": 1000000, "window": "1d", "algorithm": "fixed_window"},
    "calendar": {"limit": 1000000, "calendar": "day", "timezone": "Europe/Berlin"},
    "sliding": {"limit": 1000000, "window": "1s"},
    "gcra": {"limit": 1000000, "window": "1s", "algorithm": "gcra"},
    "acquire": {"limit": 10000, "algorithm": "concurrency", "lease_ttl": "1m"},
    "lease": {"limit": 10000, "algorithm": "concurrency", "lease_ttl": "1m"},
    "reserve": {"limit": 1000000, "window": "1d", "algorithm": "fixed_window", "reservation_ttl": "10m"},
    "two": {"limits": [
        {"name": "burst", "algorithm": "gcra", "limit": 1000000, "window": "1s"},
        {"name": "daily", "algorithm": "fixed_window", "limit": 1000000000, "window": "1d"}]},
}
c = http.client.HTTPConnection("127.0.0.1", port)
def post(path, body):
    c.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    answer = json.loads(r.read())
    assert r.status == 200, (r.status, answer)
    return answer
if rule == "batch":
    for i in range(0, n, 10):
        items = [{"key": f"batch:{j}", **rules["fixed"]} for j in range(i, i + 10)]
        answer = post("/v1/checks", {"checks": items})
        assert all(r["status"] == 200 and r["allowed"] for r in answer["results"]), answer
    sys.exit(0)
for i in range(n):
    if rule == "draw":
        answer = post("/v1/check", {"key": f"draw:{i}", **rules["reserve"]})
        drawn = post("/v1/draw", {"reservation": answer["reservation"]["id"], "cost": 1, "seq": 1})
        assert drawn["allowed"] and drawn["drawn"] == 2, drawn
        continue
    if rule == "levels":
        levels = [{"key": f"{level}:{i}", **rules["fixed"]} for level in ("org", "team", "user")]
        assert post("/v1/check", {"levels": levels})["allowed"]
        continue
    if rule == "plevels":
        keys = (f"org:{i}", f"team:{i}/{i}", f"user:{i}")
        assert post("/v1/check", {"levels": [{"policy": "fixed", "key": k} for k in keys]})["allowed"]
        continue
    if rule == "hierarchy":
        answer = post("/v1/check", {"policy": "tree", "ids": {"org": str(i), "team": str(i), "user": str(i)}})
        assert answer["allowed"] and answer["levels"][1]["key"] == f"team:{i}/{i}", answer
        continue
    if rule == "policy":
        post("/v1/check", {"policy": "fixed", "key": f"policy:{i}"})
        continue
    body = {"key": f"{rule}:{i}", **rules[rule]}
    answer = post("/v1/check", body)
    if rule == "lease":
        released = post("/v1/release", {**body, "lease": answer["lease"]["id"]})
        assert released["released"], released
PY

# run STORE BINARY RULE -> "instructions redis_usec_total"
# BINARY may carry variables for its run after @s:
#   target/release/ratekeeper@OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318@OTEL_TRACES_SAMPLER=always_off
run() {
  local out="$TMP/cg" args=(serve --listen "127.0.0.1:$PORT" --policies "$TMP/policies.toml")
  [ "$1" = redis ] && args+=(--redis-url "redis://127.0.0.1:$REDIS_PORT")
  local spec=() binary
  IFS=@ read -r -a spec <<<"$2"
  binary=${spec[0]}
  redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
  env "${spec[@]:1}" RATEKEEPER_LOG__LEVEL=warn valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$binary" "${args[@]}" >"$TMP/log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  python3 "$TMP/drive.py" "$PORT" "$N" "$3"
  kill -INT "$pid"; wait "$pid" || true
  local total usec
  # KEEP=DIR keeps each run's callgrind file there, for callgrind_annotate.
  if [ -n "${KEEP:-}" ]; then cp "$out" "$KEEP/callgrind.$1.$(basename "$binary").$(printf %s "$2" | cksum | cut -d" " -f1).$3"; fi
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  usec=$(redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' \
    | awk -F'usec=' '/^cmdstat_(evalsha|fcall):/ { split($2, a, ","); s += a[1] } END { print s + 0 }')
  echo "$total ${usec:-0}"
}

OUT=${OUT:-bench/results/cost-$(date -u +%Y%m%dT%H%M%SZ).md}
{
  echo "# Cost per check in instructions and Redis time, $(date -u +%F)"
  echo
  echo "$N checks of distinct keys over one connection, ratekeeper under callgrind (\`bash bench/cost.sh\`)."
  echo "Instructions are the whole program's divided by $N (startup included, the same in every row);"
  echo "Redis µs / check is FCALL's (or EVALSHA's) total usec from Redis's commandstats over $N (for \`lease\`, an acquire and its release). \`×\`: against the store's first row."
  echo
  echo "| store | binary | rule | instructions / check | × | Redis µs / check | × |"
  echo "|---|---|---|---|---|---|---|"
} > "$OUT"
for store in ${STORES:-memory redis}; do
  base_i="" base_u=""
  for bin in "${BINARIES[@]}"; do
    for rule in $RULES; do
      read -r i u < <(run "$store" "$bin" "$rule")
      [ -z "$base_i" ] && base_i=$i base_u=$u
      # TSV=FILE: each row's raw totals too, for bench/guard.sh.
      if [ -n "${TSV:-}" ]; then printf '%s\t%s\t%s\t%s\t%s\n' "$store" "$rule" "$N" "$i" "$u" >>"$TSV"; fi
      awk -v s="$store" -v b="$bin" -v r="$rule" -v i="$i" -v u="$u" -v bi="$base_i" -v bu="$base_u" -v n="$N" 'BEGIN {
        ru = (s == "redis") ? sprintf("%.2f | %.2f", u / n, bu ? u / bu : 0) : "- | -"
        printf "| %s | `%s` | %s | %.0f | %.2f | %s |\n", s, b, r, i / n, i / bi, ru }' | tee -a "$OUT"
    done
  done
done
echo "wrote $OUT" >&2
