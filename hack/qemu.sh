#!/usr/bin/env bash
# Fetch (once) and cache Debian's qemu-user-static emulators for the image tests that run the
# arm64 image on this machine (tests/image).
#
# Why this way: the emulator is run directly, as the container's entry point with the image's
# Python as its argument, so nothing is registered with the kernel's binfmt_misc (installing the
# package would register its handlers host-wide). The .deb is fetched with `apt-get download` and
# unpacked with `dpkg-deb -x` into the cache: nothing is installed system-wide. The binaries are
# static, so they run inside any container.
#
# Usage: hack/qemu.sh      prints the directory holding qemu-aarch64-static (and the others)
# Cache: ${JOBSET_CACHE_DIR:-$XDG_CACHE_HOME/jobset-controller or ~/.cache/jobset-controller}/qemu/bin
# Prebuilt: set JOBSET_QEMU_BIN to a directory holding qemu-aarch64-static.
set -euo pipefail

log() { printf '[qemu] %s\n' "$*" >&2; }

if [ -n "${JOBSET_QEMU_BIN:-}" ] && [ -x "$JOBSET_QEMU_BIN/qemu-aarch64-static" ]; then
  echo "$JOBSET_QEMU_BIN"
  exit 0
fi

cache_root="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
bin_dir="$cache_root/qemu/bin"
if [ -x "$bin_dir/qemu-aarch64-static" ]; then
  echo "$bin_dir"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
log "fetching Debian's qemu-user-static package ..."
if ! apt-get download qemu-user-static >/dev/null 2>&1; then
  log "apt-get download failed; refreshing the package lists once"
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get download qemu-user-static >/dev/null
fi
dpkg-deb -x qemu-user-static_*.deb root
mkdir -p "$bin_dir"
install -m 0755 root/usr/bin/qemu-aarch64-static root/usr/bin/qemu-s390x-static "$bin_dir/"
log "cached in $bin_dir"
echo "$bin_dir"
