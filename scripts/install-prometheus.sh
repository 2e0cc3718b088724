#!/usr/bin/env bash
# Installs Prometheus and promtool from Debian's `prometheus` package into .tools/prometheus/ (git-ignored)
# for the observability tests (test/e2e/prometheus.test.ts, test/unit/observability/rules.test.ts):
#
#   scripts/install-prometheus.sh
#
# The package is only downloaded and unpacked (`apt-get download` + `dpkg-deb -x`): nothing is installed
# system-wide, no service starts, and no root is needed beyond what apt-get download needs. The two
# binaries are static Go programs; the package's other dependencies serve its web UI only.
# Idempotent: a second run with the binaries of the pinned version present does nothing. Without
# apt-get or dpkg-deb it says so and exits 0, and the tests skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian bookworm's version. If apt offers another one, it is unpacked (and printed) on every run.
WANT_VERSION=2.42.0
DEST="$PWD/.tools/prometheus"
log() { printf '[prometheus-tools] %s\n' "$*" >&2; }

have() {
  [ -x "$DEST/bin/prometheus" ] && [ -x "$DEST/bin/promtool" ] && "$DEST/bin/promtool" --version 2>/dev/null | grep -q "version $WANT_VERSION"
}
if have; then exit 0; fi
for tool in apt-get dpkg-deb; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    log "skipping: $tool is not on PATH (copy prometheus and promtool $WANT_VERSION to $DEST/bin)"
    exit 0
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt's _apt user writes the download there
if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>"$tmp/apt.log"); then
  log "apt-get download prometheus failed (run apt-get update?): $(tail -n 1 "$tmp/apt.log")"
  exit 1
fi
deb=$(ls "$tmp"/prometheus_*.deb)
log "unpacking $(basename "$deb") into $DEST"
dpkg-deb -x "$deb" "$tmp/root"
mkdir -p "$DEST/bin"
install -m 755 "$tmp/root/usr/bin/prometheus" "$tmp/root/usr/bin/promtool" "$DEST/bin/"
"$DEST/bin/promtool" --version 2>&1 | head -n 1 >&2
