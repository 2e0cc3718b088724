#!/usr/bin/env bash
# `npm test`: installs what the suite needs (node modules, Envoy, Redis, and Envoy Gateway's egctl
# when Go is present), type-checks, runs every test. Extra arguments go to jest (`npm test -- test/unit`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
source scripts/node-env.sh   # Node 24 first on PATH (for every child process too)
echo "[test] node $(node --version) ($(command -v node))" >&2
# egctl translates config/k8s as Envoy Gateway would (test/deploy/manifests). Optional: without Go, or
# if the build fails, those tests skip and say why. Go's build cache makes later runs take seconds.
if command -v go >/dev/null 2>&1; then
  bash config/k8s/verify-egctl.sh --install-only || echo "[deps] egctl/envoy-gateway unavailable; their tests will skip" >&2
  bash config/istio/install-tools.sh || echo "[deps] Istio tools incomplete; the config/istio schema/patch tests that need them will skip" >&2
fi
# The Gateway API, EnvoyExtensionPolicy and InferencePool CRDs, pinned by sha256, from the Go module proxy
# (test/deploy/manifests validates config/k8s, the chart, config/istio and config/gke against them). Without
# Go the script says so, and those tests use ../shared/crds if it is beside the clone, else skip and say why.
bash config/k8s/install-crds.sh || echo "[deps] CRD schemas not installed; the CRD-schema tests use ../shared/crds or skip" >&2
# Helm and Kubernetes' JSON schemas for the chart test (test/deploy/manifests/helm-chart.test.ts). The
# script skips Helm, saying so, without Go, and the tests that need it skip with the reason.
bash charts/install-tools.sh || echo "[deps] chart tools incomplete; the Helm chart tests that need them will skip" >&2
# Prometheus and promtool (Debian's package, unpacked into .tools/prometheus) for the dashboard and alert
# tests (test/e2e/prometheus.test.ts, test/unit/observability/alert-rules.test.ts); they skip, saying why, without them.
bash scripts/install-prometheus.sh || echo "[deps] prometheus unavailable; the Prometheus tests will skip" >&2
npx tsc -p tsconfig.json --noEmit
npm run --silent lint   # ESLint and Prettier's check
exec npx jest --ci "$@"
