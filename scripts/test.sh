#!/usr/bin/env bash
# `npm test`: installs what the suite needs (node modules, Envoy, Redis), type-checks, runs every test.
# Extra arguments go to jest (e.g. `npm test -- test/unit`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
npx tsc -p tsconfig.json --noEmit
exec npx jest --ci "$@"
