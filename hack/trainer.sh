#!/usr/bin/env bash
# Build (once) and cache Kubeflow Trainer's controller manager and its manifests for the Trainer
# e2e tests (marker `trainer`): a second real client that writes JobSets (server-side apply from
# a TrainJob and a training runtime) and reads their conditions back.
#
# Why build: this machine reaches only package registries, so Trainer comes from the Go module
# proxy and is compiled with the local Go, like Kueue (hack/kueue.sh) and upstream's JobSet
# controller (hack/upstream-jobset.sh). `go mod download` of the exact version, then
# `go build ./cmd/trainer-controller-manager` in a writable copy of the module (its go.mod has no
# replace directives; it pins sigs.k8s.io/jobset v0.8.2 as its JobSet client).
#
# Usage: hack/trainer.sh      prints the bin directory on the last line of stdout
#   <cache>/trainer-<version>/bin/trainer-controller-manager   the manager
#   <cache>/trainer-<version>/crd/*.yaml                       its CRDs (manifests/base/crds)
#   <cache>/trainer-<version>/webhook/manifests.yaml           its webhook configuration
#   <cache>/trainer-<version>/runtimes/*.yaml                  its ClusterTrainingRuntimes
# Nothing of Trainer is kept in this repository: the manifests are read from the cache only.
# Cache root: ${JOBSET_CACHE_DIR:-$XDG_CACHE_HOME/jobset-controller or ~/.cache/jobset-controller}
# Prebuilt: set JOBSET_TRAINER_BIN to a bin directory laid out as above.
set -euo pipefail

TRAINER_VERSION="${TRAINER_VERSION:-v2.0.0}"   # pins k8s.io v0.32.2, controller-runtime v0.20.2
MODULE=github.com/kubeflow/trainer/v2

log() { printf '[trainer] %s\n' "$*" >&2; }
start_ts=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start_ts ))s"; }

complete() {  # $1: a bin directory
  [ -x "$1/trainer-controller-manager" ] && [ -d "$1/../crd" ] \
    && [ -f "$1/../webhook/manifests.yaml" ] && [ -d "$1/../runtimes" ]
}

if [ -n "${JOBSET_TRAINER_BIN:-}" ] && complete "$JOBSET_TRAINER_BIN"; then
  echo "$JOBSET_TRAINER_BIN"
  exit 0
fi

cache_root="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
root="$cache_root/trainer-$TRAINER_VERSION"
bin_dir="$root/bin"
if complete "$bin_dir"; then
  echo "$bin_dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed, and it is needed once to build Trainer $TRAINER_VERSION."
  log "Install Go >= 1.26, or point JOBSET_TRAINER_BIN at a directory with a prebuilt one."
  exit 1
fi

export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# No debug information compiled (-s -w drops it anyway): less CPU, same binary (hack/k8s-binaries.sh).
nodwarf="-gcflags=all=-dwarf=false"
log "building $MODULE $TRAINER_VERSION into $bin_dir (the first build takes minutes)"

log "downloading $MODULE@$TRAINER_VERSION ..."
mod_dir=$(go mod download -json "$MODULE@$TRAINER_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$mod_dir" ] || [ ! -f "$mod_dir/go.mod" ]; then
  log "go mod download $MODULE@$TRAINER_VERSION gave no module directory"
  exit 1
fi
log "module at $mod_dir ($(elapsed))"

# The module cache is read-only and the build may update go.sum: build in a writable copy.
src="$root/build/trainer"
rm -rf "$src"
mkdir -p "$src" "$bin_dir"
cp -r "$mod_dir/." "$src/"
chmod -R u+w "$src"

log "building cmd/trainer-controller-manager (downloads its dependencies first) ..."
(cd "$src" && GOFLAGS=-mod=mod go build -trimpath $nodwarf -ldflags "-s -w" \
   -o "$bin_dir/trainer-controller-manager.tmp" ./cmd/trainer-controller-manager)
mv "$bin_dir/trainer-controller-manager.tmp" "$bin_dir/trainer-controller-manager"
log "trainer-controller-manager built ($(elapsed))"

# Manifests the fixture installs or reads: CRDs, which webhook paths each kind uses, and the
# ClusterTrainingRuntimes Trainer ships (its own e2e tests run torch-distributed and
# mpi-distributed).
for d in crd webhook runtimes; do rm -rf "${root:?}/$d"; done
mkdir -p "$root/crd" "$root/webhook" "$root/runtimes"
cp "$src/manifests/base/crds/"trainer.kubeflow.org_*.yaml "$root/crd/"
cp "$src/manifests/base/webhook/manifests.yaml" "$root/webhook/manifests.yaml"
for f in "$src/manifests/base/runtimes/"*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || cp "$f" "$root/runtimes/"
done
rm -rf "$root/build"
log "done in $(elapsed); $(du -sh "$bin_dir/trainer-controller-manager" | cut -f1) binary"
echo "$bin_dir"
