#!/usr/bin/env bash
# npm run stack [-- --buffered] [-- --kv-connector kv-nixl|kv-sglang]
#
# The whole product on 127.0.0.1: simulators (render 8082, encode 8100, prefill 8200, decode 8300),
# the coordinator (gRPC 50051) and Envoy (public 8080, gateway 8081, admin 19000). Runs until
# Ctrl-C / SIGTERM. Configs, logs and the access log are written under .stack/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh node envoy redis
source scripts/node-env.sh   # Node 24 first on PATH (for every child process too)

# One node process (no wrapper relaying signals): Ctrl-C and SIGTERM reach the supervisor, which
# stops every child by PID.
exec node --import tsx scripts/stack.ts "$@"
