#!/usr/bin/env bash
# Checks config/k8s the way Envoy Gateway itself would read it, then runs the manifest tests:
#   1. installs egctl (Envoy Gateway's CLI, same version as the Gateway API CRDs the tests use) and the
#      envoy-gateway controller itself (same module and version; test/deploy/envoy-gateway-controller
#      runs it standalone) into .tools/bin;
#   2. copies Envoy Gateway's own CRDs (EnvoyProxy, ClientTrafficPolicy, ...) into .tools/crds, so the
#      schema test also covers the kinds beyond the Gateway API's and EnvoyExtensionPolicy (those, and
#      InferencePool, come from config/k8s/install-crds.sh, which the manifest run below calls first);
#   3. runs test/deploy/manifests: schema validation, `egctl x translate` of the manifests and
#      `envoy --mode validate` of the result (Envoy from scripts/ensure-deps.sh envoy).
#
#   config/k8s/verify-egctl.sh [--install-only] [jest args...]
#
# Needs Go >= 1.24 for the first run (a few minutes: egctl is a large build). Everything lands in
# .tools/ (git-ignored); cache that folder in CI, keyed on this file, and later runs take seconds.
# Without .tools/bin/egctl the translation tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/../.."

EG_VERSION=v1.9.0
EG_MODULE=github.com/envoyproxy/gateway
BIN_DIR="$PWD/.tools/bin"
CRD_DIR="$PWD/.tools/crds/envoy-gateway-$EG_VERSION"
log() { printf '[verify-egctl] %s\n' "$*" >&2; }

have_bin() {
  [ -x "$BIN_DIR/$1" ] && go version -m "$BIN_DIR/$1" 2>/dev/null | grep -Eq "^\s*mod\s+$EG_MODULE\s+$EG_VERSION\s"
}

if ! command -v go >/dev/null 2>&1; then
  log "ERROR: go is not on PATH; install Go >= 1.24 or copy an egctl $EG_VERSION binary to $BIN_DIR/egctl"
  exit 1
fi

for cmd in egctl envoy-gateway; do
  if ! have_bin "$cmd"; then
    log "installing $cmd $EG_VERSION into $BIN_DIR (first run builds it; this takes a while)"
    mkdir -p "$BIN_DIR"
    GOBIN="$BIN_DIR" go install "$EG_MODULE/cmd/$cmd@$EG_VERSION"
  fi
done

if [ ! -f "$CRD_DIR/gateway.envoyproxy.io_envoyproxies.yaml" ]; then
  src=$(cd /tmp && go mod download -json "$EG_MODULE@$EG_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).Dir))')
  log "copying Envoy Gateway $EG_VERSION CRDs from $src"
  mkdir -p "$CRD_DIR"
  cp "$src/charts/gateway-helm/charts/crds/crds/generated/"*.yaml "$CRD_DIR/"
  chmod u+w "$CRD_DIR"/*.yaml
fi

if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi
bash config/k8s/install-crds.sh
exec npx jest test/deploy/manifests "$@"
