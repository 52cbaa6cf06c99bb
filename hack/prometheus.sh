#!/usr/bin/env bash
# Fetch (once) and cache Prometheus and promtool for the tests that need a real Prometheus.
#
# Why Debian's package: the machines reach only package registries (no release downloads), and
# Debian ships prometheus as static Go binaries. The .deb is fetched with `apt-get download` and
# unpacked with `dpkg-deb -x` into the cache: nothing is installed system-wide (no service user,
# no systemd unit), and nothing is built.
#
# Usage: hack/prometheus.sh      prints the bin directory (prometheus, promtool) on the last line
# Cache: ${JOBSET_CACHE_DIR:-$XDG_CACHE_HOME/jobset-controller or ~/.cache/jobset-controller}/prometheus/bin
# Prebuilt: set JOBSET_PROMETHEUS_BIN to a directory holding both binaries.
set -euo pipefail

log() { printf '[prometheus] %s\n' "$*" >&2; }

if [ -n "${JOBSET_PROMETHEUS_BIN:-}" ] && [ -x "$JOBSET_PROMETHEUS_BIN/prometheus" ] \
  && [ -x "$JOBSET_PROMETHEUS_BIN/promtool" ]; then
  echo "$JOBSET_PROMETHEUS_BIN"
  exit 0
fi

cache_root="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
bin_dir="$cache_root/prometheus/bin"
if [ -x "$bin_dir/prometheus" ] && [ -x "$bin_dir/promtool" ]; then
  echo "$bin_dir"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
log "fetching Debian's prometheus package ..."
if ! apt-get download prometheus >/dev/null 2>&1; then
  log "apt-get download failed; refreshing the package lists once"
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get download prometheus >/dev/null
fi
dpkg-deb -x prometheus_*.deb root
mkdir -p "$bin_dir"
install -m 0755 root/usr/bin/prometheus root/usr/bin/promtool "$bin_dir/"
log "$("$bin_dir/promtool" --version 2>&1 | head -n 1)"
echo "$bin_dir"
