#!/usr/bin/env bash
# Runs the whole test suite, the tests against real Redis included.
# The Redis tests start their own redis-server processes on free loopback
# ports, so redis-server must be installed; on Debian/Ubuntu this installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    echo "redis-server is missing: installing it with apt-get" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  else
    echo "redis-server is missing: install Redis (e.g. 'brew install redis') and run again" >&2
    exit 1
  fi
fi

cargo test --locked "$@"
