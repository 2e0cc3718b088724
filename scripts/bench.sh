#!/usr/bin/env bash
# npm run bench [-- SUITE [suite options]]   (default suite: spine; suites: spine, large-body, conditional, selective, compare, budget, dashboard, workers;
# `npm run bench -- spine --help`)
#
# Benchmarks run everything on 127.0.0.1 with free ports, so they can run next to `npm run stack`.
# Results go to bench/results/<suite>.json; logs of the last run to .cache/bench-<suite>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh node envoy
source scripts/node-env.sh   # Node 24 first on PATH (for every child process too)

suite="spine"
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  suite="$1"
  shift
fi
case "$suite" in
  spine) exec node --import tsx bench/spine.ts "$@" ;;
  large-body) exec node --import tsx bench/large-body.ts "$@" ;;
  conditional) exec node --import tsx bench/conditional.ts "$@" ;;
  selective) exec node --import tsx bench/selective.ts "$@" ;;
  compare) exec node --import tsx bench/compare.ts "$@" ;;
  budget) exec node --import tsx bench/budget.ts "$@" ;;
  dashboard) exec node --import tsx bench/dashboard.ts "$@" ;;
  workers) exec node --import tsx bench/workers.ts "$@" ;;
  *)
    echo "bench: unknown suite '$suite' (available: spine, large-body, conditional, selective, compare, budget, dashboard, workers)" >&2
    exit 2
    ;;
esac
