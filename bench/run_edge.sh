# Sourced by bench/run.sh (needs its start, run_wrk, free_port, cpu_ticks,
# checks_total, pids, TMP, OUT, BIN, RLS_LOAD, REDIS_PORT, BATCH_WINDOW,
# DURATION, CONNECTIONS): the rows of issue 8.
#
#   PROXY: forward-auth through a real nginx running the shipped
#     examples/nginx/ratekeeper.conf (only its ports changed, as
#     tests/proxies/servers/nginx.rs does), against the same nginx proxying straight
#     to the same upstream. The upstream is a `return 200` server of that
#     nginx; the direct route uses the example's own `upstream app`, so both
#     routes reach it alike. `÷ direct` is the share of nginx's throughput
#     left with ratekeeper asked before every request.
#   RLS: ShouldRateLimit at 64 concurrent streams (examples/rls_load.rs)
#     against POST /v1/check at 64 connections (wrk), same instance, same key
#     shape (100k keys, fixed_window 100000 a minute, never denied).

# The edge instance: the Redis store (batch window as the `batched` rows),
# the policies file of run.sh, gRPC on, an RLS config with one descriptor.
GRPC_PORT=$(free_port)
cat > "$TMP/rls.yaml" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 100000 }
YAML
start edge env RATEKEEPER_REDIS__BATCH_WINDOW="$BATCH_WINDOW" \
  RATEKEEPER_GRPC__LISTEN="127.0.0.1:$GRPC_PORT" RATEKEEPER_RLS__CONFIG="$TMP/rls.yaml" \
  "$BIN" serve --redis-url "redis://127.0.0.1:$REDIS_PORT"
for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[edge]}/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:${PORT[edge]}/readyz" >/dev/null || { echo "the edge ratekeeper did not start" >&2; exit 1; }

secs() { # 10s | 1m -> seconds
  case $1 in *m) echo $(( ${1%m} * 60 ));; *s) echo "${1%s}";; *) echo "$1";; esac
}

if [ "${PROXY:-1}" != 0 ]; then
  NGINX_DIR="$TMP/nginx"; mkdir -p "$NGINX_DIR"
  UP_PORT=$(free_port); PORT[nginx_auth]=$(free_port); PORT[nginx_direct]=$(free_port)
  sed -e "s/server 127.0.0.1:3000;/server 127.0.0.1:$UP_PORT;/" \
      -e "s/server 127.0.0.1:8080;/server 127.0.0.1:${PORT[edge]};/" \
      -e "s/listen 127.0.0.1:8000;/listen 127.0.0.1:${PORT[nginx_auth]};/" \
      examples/nginx/ratekeeper.conf > "$NGINX_DIR/site.conf"
  if cmp -s examples/nginx/ratekeeper.conf "$NGINX_DIR/site.conf"; then
    echo "examples/nginx/ratekeeper.conf: its addresses changed; update bench/run_edge.sh" >&2; exit 1
  fi
  # One nginx process (as tests/proxies/servers/nginx.rs runs it), so its CPU is one
  # pid's: the upstream, the direct route and the example's route.
  cat > "$NGINX_DIR/nginx.conf" <<NGINX
master_process off;
worker_processes 1;
pid $NGINX_DIR/nginx.pid;
error_log $NGINX_DIR/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $NGINX_DIR/body;
    proxy_temp_path $NGINX_DIR/proxy;
    fastcgi_temp_path $NGINX_DIR/fastcgi;
    uwsgi_temp_path $NGINX_DIR/uwsgi;
    scgi_temp_path $NGINX_DIR/scgi;
    include $NGINX_DIR/site.conf;
    server {
        listen 127.0.0.1:$UP_PORT;
        location / { return 200 "hello\n"; }
    }
    server {
        listen 127.0.0.1:${PORT[nginx_direct]};
        location / { proxy_pass http://app; }
    }
}
NGINX
  nginx -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" -g 'daemon off;' &
  PID[nginx_auth]=$!; PID[nginx_direct]=$!; pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:${PORT[nginx_direct]}/" >/dev/null && break; sleep 0.1; done
  # Both routes answer the upstream's body before anything is measured.
  for route in nginx_direct nginx_auth; do
    body=$(curl -sf -H 'X-API-Key: probe' "http://127.0.0.1:${PORT[$route]}/" || true)
    if [ "$body" != hello ]; then
      echo "nginx $route answered '$body', not the upstream: $(cat "$NGINX_DIR/error.log")" >&2; exit 1
    fi
  done
  {
    echo
    echo "## Forward-auth through nginx"
    echo
    echo "nginx $(nginx -v 2>&1 | cut -d/ -f2), one process, running \`examples/nginx/ratekeeper.conf\` (ports changed), in front"
    echo "of an upstream that is a \`return 200\` server of the same nginx. \`direct\`: the same nginx proxying"
    echo "straight to that upstream through the example's \`upstream app\`; \`auth_request\`: the example's"
    echo "route, asking ratekeeper \`/v1/auth/api\` (Redis store, \`batch_window = $BATCH_WINDOW\`; policy \`api\`:"
    echo "fixed_window 100000 a minute, never reached) before each request; \`ratekeeper alone\`: wrk"
    echo "straight at \`/v1/auth/api\`. Each request carries \`X-API-Key: s<n % 100000>\` (bench/forward.lua)."
    echo "\`÷ direct\` is requests/s over the direct route's at the same connections, same run; CPU is"
    echo "the measured process's (nginx; ratekeeper for \`ratekeeper alone\`) user+system seconds per 100k requests."
    echo "The example's \`upstream app\` has no \`keepalive\`, so both nginx routes open a connection to the"
    echo "upstream per request; its \`upstream ratekeeper\` keeps 16 connections alive."
    echo
    echo "| route | conns | requests/s | p50 µs | p99 µs | p99.9 µs | CPU s/100k | ÷ direct | errors |"
    echo "|---|---|---|---|---|---|---|---|---|"
  } >> "$OUT"
  for c in $CONNECTIONS; do
    WRK_SCRIPT=bench/forward.lua run_wrk nginx_direct spread fixed_window "$c"
    DIRECT_RPS=$R_rps
    echo "| nginx → upstream (direct) | $c | $R_rps | $R_p50 | $R_p99 | $R_p999 | $R_cpu | - | $R_errors |" >> "$OUT"
    echo "proxy direct c=$c: $R_rps/s p50 ${R_p50}us p99 ${R_p99}us errors $R_errors" >&2
    WRK_SCRIPT=bench/forward.lua run_wrk nginx_auth spread fixed_window "$c"
    ratio=$(awk -v a="$R_rps" -v b="$DIRECT_RPS" 'BEGIN { printf "%.2f", a / b }')
    echo "| nginx → auth_request ratekeeper → upstream | $c | $R_rps | $R_p50 | $R_p99 | $R_p999 | $R_cpu | $ratio | $R_errors |" >> "$OUT"
    echo "proxy auth_request c=$c: $R_rps/s p50 ${R_p50}us p99 ${R_p99}us errors $R_errors (÷ direct $ratio)" >&2
    PORT[edge_auth]=${PORT[edge]}; PID[edge_auth]=${PID[edge]}
    TARGET_PATH=/v1/auth/api WRK_SCRIPT=bench/forward.lua run_wrk edge_auth spread fixed_window "$c"
    echo "| ratekeeper alone (\`GET /v1/auth/api\`) | $c | $R_rps | $R_p50 | $R_p99 | $R_p999 | $R_cpu | - | $R_errors |" >> "$OUT"
    echo "proxy ratekeeper alone c=$c: $R_rps/s p50 ${R_p50}us denied $R_denied errors $R_errors" >&2
  done
  rcli flushall >/dev/null
fi

if [ "${RLS:-1}" != 0 ]; then
  RLS_STREAMS=${RLS_STREAMS:-64}
  RLS_CONNECTIONS=${RLS_CONNECTIONS:-4}
  {
    echo
    echo "## Envoy RLS \`ShouldRateLimit\` against \`POST /v1/check\`"
    echo
    echo "One ratekeeper (Redis store, \`batch_window = $BATCH_WINDOW\`) serving both. \`/v1/check\`: wrk, $RLS_STREAMS"
    echo "keep-alive connections, \`{\"key\": \"s<n % 100000>\", \"limit\": 100000, \"window\": \"1m\", \"algorithm\":"
    echo "\"fixed_window\"}\`. RLS: \`examples/rls_load.rs\` (tonic, the client side of envoy-types; one thread"
    echo "like \`wrk -t1\`), $RLS_STREAMS calls in flight over $RLS_CONNECTIONS HTTP/2 connections, domain \`bench\`, one"
    echo "descriptor \`client = s<n % 100000>\` under \`rate_limit: {unit: minute, requests_per_unit: 100000}\`"
    echo "(fixed window, never reached). \`÷ /v1/check\` is calls/s over the /v1/check row's, same run."
    echo "CPU is ratekeeper's user+system seconds per 100k calls."
    echo
    echo "| interface | concurrency | calls/s | p50 µs | p99 µs | p99.9 µs | CPU s/100k | denied / OVER_LIMIT | ÷ /v1/check | errors |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
  } >> "$OUT"
  run_wrk edge spread fixed_window "$RLS_STREAMS"
  CHECK_RPS=$R_rps
  echo "| \`POST /v1/check\` (HTTP/1.1, wrk) | $RLS_STREAMS connections | $R_rps | $R_p50 | $R_p99 | $R_p999 | $R_cpu | $R_denied | - | $R_errors |" >> "$OUT"
  echo "check c=$RLS_STREAMS: $R_rps/s p50 ${R_p50}us p99 ${R_p99}us" >&2
  rcli flushall >/dev/null
  cpu0=$(cpu_ticks "${PID[edge]}")
  line=$("$RLS_LOAD" "127.0.0.1:$GRPC_PORT" bench client "$RLS_STREAMS" "$RLS_CONNECTIONS" "$(secs "$DURATION")" | grep '^RESULT')
  cpu1=$(cpu_ticks "${PID[edge]}")
  eval "${line#RESULT }"
  cpu=$(awk -v t=$((cpu1 - cpu0)) -v hz="$TICKS" -v n="$requests" 'BEGIN { printf "%.2f", n ? t / hz / n * 100000 : 0 }')
  ratio=$(awk -v a="$rps" -v b="$CHECK_RPS" 'BEGIN { printf "%.2f", a / b }')
  not_ok=$(awk -v d="$over_limit" -v n="$requests" 'BEGIN { printf "%.0f%%", n ? 100 * d / n : 0 }')
  echo "| RLS \`ShouldRateLimit\` (gRPC, rls_load) | $RLS_STREAMS streams / $RLS_CONNECTIONS connections | $rps | $p50_us | $p99_us | $p999_us | $cpu | $not_ok | $ratio | $errors |" >> "$OUT"
  echo "rls streams=$RLS_STREAMS: $rps/s p50 ${p50_us}us p99 ${p99_us}us (÷ check $ratio) errors $errors" >&2
  rcli flushall >/dev/null
fi
