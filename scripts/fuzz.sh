#!/usr/bin/env bash
# npm run fuzz [-- --cases N] [--seed S] [--level protocol|http]
#
# The fuzz suites (test/fuzz) with N cases in total (default 100000) and a fresh, printed seed.
# `npm test` runs the same suites with a fixed seed and 10000 cases. Everything stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh node envoy
source scripts/node-env.sh   # Node 24 first on PATH (for every child process too)
exec node --import tsx scripts/fuzz.ts "$@"
