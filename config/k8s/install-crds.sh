#!/usr/bin/env bash
# The CRD schemas the manifest tests (test/deploy/manifests) check config/k8s, charts/, config/istio
# and config/gke against, into .tools/crds/project (git-ignored; cache it in CI), so that a clone
# needs nothing beside it:
#   gatewayapi-crds.yaml                               the Gateway API CRDs as bundled by Envoy Gateway v1.9.0
#   gateway.envoyproxy.io_envoyextensionpolicies.yaml  Envoy Gateway v1.9.0
#   inference.networking.k8s.io_inferencepools.yaml    gateway-api-inference-extension v1.6.0
# Both modules come through the Go module proxy (`go mod download`, which checks them against
# sum.golang.org), and each file must also have the sha256 pinned below: a changed upstream, or a
# new version here, cannot change what the tests validate against without a change to this file.
# The same files may sit in ../shared/crds beside the repository; the tests take this folder first.
#
#   config/k8s/install-crds.sh
#
# Needs Go for the first run (seconds); later runs only check the pins. Without Go it says so and
# exits 1, and the tests fall back to ../shared/crds, or skip and say why.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEST="$PWD/.tools/crds/project"
# module@version, file in the module, sha256 of that file.
PINS=(
  "github.com/envoyproxy/gateway@v1.9.0 charts/gateway-helm/charts/crds/crds/gatewayapi-crds.yaml f0342ed49e7cd1b62624659984ea2934addd334efc8630827d0e1a81194b157a"
  "github.com/envoyproxy/gateway@v1.9.0 charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml 92f4dfdd67be4b242511381d6175f517782e655233fdf5b5e28a400ea5601f79"
  "sigs.k8s.io/gateway-api-inference-extension@v1.6.0 config/crd/bases/inference.networking.k8s.io_inferencepools.yaml 55e0dbf39c50c4bbdd60106493a4573df4bb44479f9ce46762f1af718883e5cd"
)
log() { printf '[install-crds] %s\n' "$*" >&2; }

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1; else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# True when every pinned file is in $1 with its pinned content.
complete_in() {
  local mod file sum
  for pin in "${PINS[@]}"; do
    read -r mod file sum <<<"$pin"
    [ -f "$1/$(basename "$file")" ] && [ "$(sha256_of "$1/$(basename "$file")")" = "$sum" ] || return 1
  done
}

if complete_in "$DEST"; then exit 0; fi

if ! command -v go >/dev/null 2>&1; then
  log "go is not on PATH; the CRD-schema tests use ../shared/crds if it is there, else they skip"
  exit 1
fi

mkdir -p "$(dirname "$DEST")"
stage=$(mktemp -d "$DEST.XXXXXX")
trap 'rm -rf "$stage"' EXIT
declare -A module_dirs=()
for pin in "${PINS[@]}"; do
  read -r mod file sum <<<"$pin"
  if [ -z "${module_dirs[$mod]:-}" ]; then
    # Outside any module (the staging folder), so no go.mod or go.work gets in the way.
    json=$(cd "$stage" && GOFLAGS=-mod=mod GOWORK=off go mod download -json "$mod") || {
      log "go mod download $mod failed: $json"
      exit 1
    }
    module_dirs[$mod]=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    [ -d "${module_dirs[$mod]}" ] || { log "go mod download $mod printed no module folder: $json"; exit 1; }
    log "copying CRDs from $mod (${module_dirs[$mod]})"
  fi
  cp "${module_dirs[$mod]}/$file" "$stage/"
  got=$(sha256_of "$stage/$(basename "$file")")
  if [ "$got" != "$sum" ]; then
    log "ERROR: $mod $file has sha256 $got, pinned $sum; nothing installed"
    exit 1
  fi
done
chmod 755 "$stage"
chmod 644 "$stage"/*.yaml
rm -rf "$DEST"
mv "$stage" "$DEST"
log "installed ${#PINS[@]} pinned CRD files into $DEST"
