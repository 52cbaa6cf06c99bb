#!/usr/bin/env bash
# Build (once) and cache Kueue's manager and its manifests for the Kueue e2e tests (marker `kueue`).
#
# Why build: this machine reaches only package registries, so Kueue comes from the Go module proxy
# and is compiled with the local Go, like the Kubernetes binaries (hack/k8s-binaries.sh).
# Why not `go install sigs.k8s.io/kueue/cmd/kueue@version`: the proxy serves this module's single
# versions but answers 403 to its version list, which `go install` asks for (deprecation check).
# `go mod download` of the exact version works; the module's go.mod has no replace directives, so a
# writable copy of it builds `./cmd/kueue` as is.
#
# Usage: hack/kueue.sh      prints the bin directory on the last line of stdout
#   <cache>/kueue-<version>/bin/kueue             the manager
#   <cache>/kueue-<version>/crd/*.yaml            Kueue's CRDs (config/components/crd/bases)
#   <cache>/kueue-<version>/webhook/manifests.yaml  its generated webhook configurations
# Cache root: ${JOBSET_CACHE_DIR:-$XDG_CACHE_HOME/jobset-controller or ~/.cache/jobset-controller}
# Prebuilt: set JOBSET_KUEUE_BIN to a bin directory laid out as above (kueue, ../crd, ../webhook).
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"   # pins k8s.io v0.36.2, controller-runtime v0.24.1, jobset v0.12.0

log() { printf '[kueue] %s\n' "$*" >&2; }
start_ts=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start_ts ))s"; }

complete() {  # $1: a bin directory
  [ -x "$1/kueue" ] && [ -d "$1/../crd" ] && [ -f "$1/../webhook/manifests.yaml" ]
}

if [ -n "${JOBSET_KUEUE_BIN:-}" ] && complete "$JOBSET_KUEUE_BIN"; then
  echo "$JOBSET_KUEUE_BIN"
  exit 0
fi

cache_root="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
root="$cache_root/kueue-$KUEUE_VERSION"
bin_dir="$root/bin"
if complete "$bin_dir"; then
  echo "$bin_dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed, and it is needed once to build Kueue $KUEUE_VERSION."
  log "Install Go >= 1.26, or point JOBSET_KUEUE_BIN at a directory with a prebuilt kueue."
  exit 1
fi

export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# No debug information compiled (-s -w drops it anyway): less CPU, same binary (hack/k8s-binaries.sh).
nodwarf="-gcflags=all=-dwarf=false"
log "building Kueue $KUEUE_VERSION into $bin_dir (first build takes several minutes; later runs reuse it)"

log "downloading sigs.k8s.io/kueue@$KUEUE_VERSION ..."
mod_dir=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$mod_dir" ] || [ ! -f "$mod_dir/go.mod" ]; then
  log "go mod download sigs.k8s.io/kueue@$KUEUE_VERSION gave no module directory"
  exit 1
fi
log "module at $mod_dir ($(elapsed))"

# The module cache is read-only; the build writes go.sum updates, so it runs in a writable copy.
src="$root/build/kueue"
rm -rf "$src"
mkdir -p "$src" "$bin_dir" "$root/crd" "$root/webhook"
cp -r "$mod_dir/." "$src/"
chmod -R u+w "$src"

log "building cmd/kueue (downloads its dependencies first) ..."
(cd "$src" && GOFLAGS=-mod=mod go build -trimpath $nodwarf \
   -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
   -o "$bin_dir/kueue.tmp" ./cmd/kueue)
mv "$bin_dir/kueue.tmp" "$bin_dir/kueue"
log "kueue built ($(elapsed))"

# Manifests the fixture installs or reads (CRDs, and which webhook paths each kind uses).
rm -f "$root/crd/"*.yaml
cp "$src/config/components/crd/bases/"*.yaml "$root/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$root/webhook/manifests.yaml"
rm -rf "$root/build"
log "done in $(elapsed); $(du -sh "$bin_dir/kueue" | cut -f1) binary, $(ls "$root/crd" | wc -l) CRDs"
echo "$bin_dir"
