# Sourced by the npm scripts (test, stack, start, bench, fuzz, soak) after `ensure-deps.sh node`:
# puts the project's Node 24 first on PATH when the system `node` is older, so that every child
# process (npx, jest, tsx, the service a test spawns) runs on Node 24 too.
# The version and folder are defined here once; ensure-deps.sh installs into that folder.
NODE24_VERSION=24.22.3
NODE24_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.tools/node-v$NODE24_VERSION"

# Major version of the `node` found on PATH (0 when there is none).
node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ -x "$NODE24_DIR/bin/node" ] && [ "$(node_major)" -lt 24 ]; then
  export PATH="$NODE24_DIR/bin:$PATH"
fi
