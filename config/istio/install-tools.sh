#!/usr/bin/env bash
# What the config/istio tests need, into .tools/ (git-ignored; cache it in CI):
#   1. Istio's CRD schemas (EnvoyFilter, DestinationRule, ...) from the istio.io/api Go module, for
#      test/deploy/manifests/istio-manifests.test.ts;
#   2. .tools/bin/epd-istio-patch, built from test/deploy/istio (our program around istio.io/istio's
#      EnvoyFilter patch code), for test/deploy/istio-patch.test.ts. istio.io/istio is a large module:
#      the first build takes a long while; later runs take seconds.
# Needs Go; without it (or if a step fails) the tests that need the step skip and say why.
#
#   config/istio/install-tools.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

ISTIO_API_VERSION=v1.32.0
DEST="$PWD/.tools/crds/istio-api-$ISTIO_API_VERSION"
PATCHER="$PWD/.tools/bin/epd-istio-patch"
PATCHER_SRC="$PWD/test/deploy/istio"
log() { printf '[istio-tools] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  log "go is not on PATH; the Istio schema and patch tests will skip"
  exit 1
fi
if [ ! -f "$DEST/customresourcedefinitions.gen.yaml" ]; then
  src=$(cd /tmp && go mod download -json "istio.io/api@$ISTIO_API_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).Dir))')
  log "copying Istio $ISTIO_API_VERSION CRDs from $src"
  mkdir -p "$DEST"
  cp "$src/kubernetes/customresourcedefinitions.gen.yaml" "$DEST/"
  chmod u+w "$DEST"/*.yaml
fi
if [ ! -x "$PATCHER" ] || [ "$PATCHER_SRC/main.go" -nt "$PATCHER" ] || [ "$PATCHER_SRC/go.mod" -nt "$PATCHER" ]; then
  log "building $PATCHER (istio.io/istio's envoyfilter package; the first build is long)"
  mkdir -p "$(dirname "$PATCHER")"
  (cd "$PATCHER_SRC" && CGO_ENABLED=0 go build -o "$PATCHER" .)
fi
