#!/usr/bin/env bash
# Makes local stand-ins for the public base images that the Dockerfile and
# docker-compose.yml name, so that they build and run on a machine that can
# reach no container registry (the project's test machines reach only
# crates.io, PyPI and Debian's packages):
#
#   rust:1.95-bookworm                      Debian bookworm + this machine's Rust toolchain,
#                                           laid out as the official image lays it out
#   gcr.io/distroless/cc-debian12:nonroot   Debian packages unpacked into a folder, uid 65532
#   redis:7.2-alpine                        Debian's redis-server (7.0), protected mode off
#                                           as in the official image
#
# All three grow from one Debian base that debootstrap makes from the
# machine's own apt source. Each stand-in carries a label with a key of what
# it was made from; a second run with the same inputs rebuilds nothing. An
# image of the same name WITHOUT our label is a real one (pulled on a machine
# with a registry): it is used as it is and never overwritten.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
label=org.ratekeeper.standin

die() { echo "standins: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || die "no Docker Engine answers ('docker info' failed).
Install one (Debian: apt-get install docker.io docker-compose; then start it:
'systemctl start docker' or 'dockerd &') and make sure this user may use it."

sha() { sha256sum | cut -c1-16; }

# What the image of this name was made from: our key, "real" for an image
# without our label, or "" when there is none.
current_key() {
  local out
  out="$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null)" || { echo ""; return; }
  if [ -z "$out" ] || [ "$out" = "<no value>" ]; then echo real; else echo "$out"; fi
}

# needs NAME KEY: true when NAME must be (re)built.
needs() {
  local have; have="$(current_key "$1")"
  if [ "$have" = real ]; then echo "standins: $1 is a real image; using it" >&2; return 1; fi
  [ "$have" != "$2" ]
}

mirror="$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
[ -n "$mirror" ] || mirror="$(awk '$1=="deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
suite=bookworm

# 1. The Debian base, from debootstrap.
base=ratekeeper-standin/debian:$suite
base_key="$(printf '%s %s %s v1' "$mirror" "$suite" "$(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo none)" | sha)"
if needs "$base" "$base_key"; then
  if ! command -v debootstrap >/dev/null && [ ! -x /usr/sbin/debootstrap ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
      echo "standins: debootstrap is missing: installing it with apt-get" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
        || die "could not install debootstrap (apt-get install debootstrap)"
    else
      die "debootstrap is missing: install it as root (Debian: apt-get install debootstrap) and run again"
    fi
    # The key names debootstrap's version, known only now.
    base_key="$(printf '%s %s %s v1' "$mirror" "$suite" "$(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo none)" | sha)"
  fi
  [ "$(id -u)" -eq 0 ] || die "debootstrap needs root; run the tests as root or build '$base' once by hand"
  root="$(mktemp -d "${TMPDIR:-/tmp}/rk-debootstrap.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  echo "standins: debootstrap $suite from $mirror (about 30 s)" >&2
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import \
    --change "LABEL $label=$base_key" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$base" >/dev/null
  rm -rf "$root"; trap - EXIT
fi

# 2. The builder: the base plus this machine's Rust toolchain.
sysroot="$(rustc --print sysroot)"
rust_version="$(rustc -V | awk '{print $2}')"
rust_name="rust:1.95-bookworm"
# The machine's own CA additions (a TLS-inspecting egress proxy's, a
# company's) are trusted in the builder as on the host, or cargo inside it
# could not fetch crates through the same network the host uses.
local_cas=/usr/local/share/ca-certificates
rust_key="$(printf '%s|%s|%s|%s|%s' "$base_key" "$(rustc -vV)" "$(cargo -V)" \
  "$(sha < "$here/rust.Dockerfile")" "$(cat "$local_cas"/*.crt 2>/dev/null | sha)" | sha)"
if needs "$rust_name" "$rust_key"; then
  ctx="$(mktemp -d "${TMPDIR:-/tmp}/rk-rust.XXXXXX")"
  trap 'rm -rf "$ctx"' EXIT
  mkdir -p "$ctx/toolchain"
  # bin and lib are the toolchain; share/ is mostly documentation.
  cp -a "$sysroot/bin" "$sysroot/lib" "$ctx/toolchain/"
  mkdir "$ctx/local-cas"
  cp "$local_cas"/*.crt "$ctx/local-cas/" 2>/dev/null || true
  cp "$here/rust.Dockerfile" "$ctx/Dockerfile"
  echo "standins: building $rust_name from Rust $rust_version" >&2
  docker build -q --label "$label=$rust_key" --build-arg "BASE=$base" \
    --build-arg "RUST_VERSION=$rust_version" -t "$rust_name" "$ctx" >/dev/null
  rm -rf "$ctx"; trap - EXIT
fi

# build_from NAME DOCKERFILE [FILE...]: a stand-in that grows from the base
# with apt; its key covers the Dockerfile and the files it copies.
build_from() {
  local name="$1" file="$here/$2" key
  shift 2
  # Contents only: the checkout's path must not change the key.
  key="$(printf '%s|%s' "$base_key" "$(cd "$here" && cat "$file" "$@" | sha)" | sha)"
  if needs "$name" "$key"; then
    echo "standins: building $name" >&2
    docker build -q --label "$label=$key" --build-arg "BASE=$base" \
      -t "$name" -f "$file" "$here" >/dev/null
  fi
}

# 3. The distroless-style runtime base, and 4. Redis.
build_from gcr.io/distroless/cc-debian12:nonroot distroless.Dockerfile
build_from redis:7.2-alpine redis.Dockerfile redis-entrypoint.sh
echo "standins: ready" >&2
