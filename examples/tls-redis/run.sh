#!/usr/bin/env bash
# Makes a CA and a server and a client certificate with openssl, starts
# redis-server on a TLS port only (client certificates required), then
# ratekeeper against it with ratekeeper.toml, sends one check and stops both.
#   RATEKEEPER  the binary (default: ratekeeper on PATH)
#   REDIS_TLS_PORT, LISTEN  where Redis and ratekeeper listen (6380, 127.0.0.1:8080)
#   WORK        where the certificates go (default: a fresh temp directory)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ratekeeper=${RATEKEEPER:-ratekeeper}
port=${REDIS_TLS_PORT:-6380}
listen=${LISTEN:-127.0.0.1:8080}
work=${WORK:-$(mktemp -d)}
cd "$work"

ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -days 30 -subj "/CN=example CA" -keyout ca.key -out ca.crt \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
for who in server client; do
  openssl req "${ec[@]}" -subj "/CN=$who" -keyout "$who.key" -out "$who.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$who.ext"
  openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$who.ext" -out "$who.crt" 2>/dev/null
done

redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --tls-cert-file server.crt --tls-key-file server.key --tls-ca-cert-file ca.crt \
  --tls-auth-clients yes >redis.log 2>&1 &
redis_pid=$!
rk_pid=
trap 'kill $redis_pid $rk_pid 2>/dev/null || true' EXIT
tls=(--tls --cacert ca.crt --cert client.crt --key client.key)
until redis-cli "${tls[@]}" -p "$port" ping 2>/dev/null | grep -q PONG; do sleep 0.1; done

"$ratekeeper" serve --config "$here/ratekeeper.toml" --listen "$listen" \
  --redis-url "rediss://127.0.0.1:$port" >ratekeeper.log 2>&1 &
rk_pid=$!
for _ in $(seq 100); do
  curl -sf "http://$listen/readyz" >/dev/null && break
  sleep 0.1
done
curl -s "http://$listen/readyz"; echo
curl -s -X POST "http://$listen/v1/check" -H 'content-type: application/json' \
  -d '{"key":"alice","limit":5,"window":"1m"}'
echo
