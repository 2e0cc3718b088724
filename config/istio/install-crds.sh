#!/usr/bin/env bash
# Copies Istio's CRD schemas (EnvoyFilter, DestinationRule, ...) from the istio.io/api Go module into
# .tools/crds, where test/deploy/manifests/istio-manifests.test.ts validates config/istio against
# them. Needs Go (the module proxy serves istio.io/api); without the copy those tests skip and say why.
#
#   config/istio/install-crds.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

ISTIO_API_VERSION=v1.32.0
DEST="$PWD/.tools/crds/istio-api-$ISTIO_API_VERSION"
[ -f "$DEST/customresourcedefinitions.gen.yaml" ] && exit 0
if ! command -v go >/dev/null 2>&1; then
  echo "[istio-crds] go is not on PATH; the Istio schema tests will skip" >&2
  exit 1
fi
src=$(cd /tmp && go mod download -json "istio.io/api@$ISTIO_API_VERSION" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).Dir))')
echo "[istio-crds] copying Istio $ISTIO_API_VERSION CRDs from $src" >&2
mkdir -p "$DEST"
cp "$src/kubernetes/customresourcedefinitions.gen.yaml" "$DEST/"
chmod u+w "$DEST"/*.yaml
