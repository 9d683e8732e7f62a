# Sourced by bench/tls.sh and bench/listener_tls.sh.
# server_certs DIR: a CA (ca.crt) and a server certificate for 127.0.0.1
# (server.crt, server.key), ECDSA P-256, valid two days; no client
# certificates.
server_certs() {
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  ( cd "$1"
    openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=bench CA" -keyout ca.key -out ca.crt \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    openssl req "${ec[@]}" -subj "/CN=server" -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.crt 2>/dev/null )
}
