#!/usr/bin/env bash
# npm start [-- --config FILE ...]: the built service (dist/, built first if missing) on Node 24.
# npm runs this at the package root, where the default config/coordinator.yaml and relative paths
# inside a config resolve as before; a relative `--config FILE` is taken from the folder `npm start`
# was typed in (npm's INIT_CWD), so it works from anywhere in the checkout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/ensure-deps.sh node
source scripts/node-env.sh
if [ ! -f dist/src/main.js ]; then
  echo "[start] building dist/ (npm run build)" >&2
  npx tsc -p tsconfig.json
fi
from="${INIT_CWD:-$root}"
args=()
while [ $# -gt 0 ]; do
  a="$1"; shift
  if { [ "$a" = "--config" ] || [ "$a" = "-config" ]; } && [ $# -gt 0 ]; then
    f="$1"; shift
    [[ "$f" = /* ]] || f="$from/$f"
    args+=("$a" "$f")
  elif [[ "$a" == --config=* || "$a" == -config=* ]]; then
    f="${a#*=}"
    [[ "$f" = /* ]] || f="$from/$f"
    args+=("${a%%=*}=$f")
  else
    args+=("$a")
  fi
done
# V8's young generation capped at 4 MiB a semi-space (README, Performance: memory): by default it
# grows to 64 MiB under load, which more than doubled our RSS for no CPU the bench could measure.
# The old generation grows by half its live size between full collections (V8: up to 4x), which
# kept RSS about 50 MB lower at the same CPU. The memory reducer's collections, which V8 runs when
# the service goes quiet, run without V8's reduce-memory mode, which threw our optimised code away
# (launch/service-node-flags.ts). No allocation-site pretenuring: after a burst of load V8 put the
# request path's short-lived objects straight into the old generation: 9-16 full collections per
# 4,000 requests at concurrency 8 against 1-2 without.
exec node --max-semi-space-size=4 --heap-growing-percent=50 --no-memory-reducer-favors-memory --no-allocation-site-pretenuring dist/src/main.js "${args[@]}"
