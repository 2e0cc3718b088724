#!/usr/bin/env bash
# npm run soak [-- --minutes N] [--rate RPS] [--buffered] [--stream-cap N] [--out FILE]
#
# Mixed traffic at half of the measured peak through the real Envoy, for N minutes (default 10);
# reports errors and the RSS slope of the coordinator process. Not part of CI. Everything listens on
# 127.0.0.1 with free ports; logs and the JSON report go to .cache/soak/run-<time>-<pid>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh node envoy
source scripts/node-env.sh   # Node 24 first on PATH (for every child process too)
exec node --import tsx scripts/soak.ts "$@"
