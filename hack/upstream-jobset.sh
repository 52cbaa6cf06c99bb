#!/usr/bin/env bash
# Build (once) and cache upstream's JobSet controller (sigs.k8s.io/jobset, the Go implementation
# this project replaces) with its manifests and Helm chart: the other side of the differential,
# swap and chart-swap tests, and the reference of the side-by-side benchmark.
#
# Why build: this machine reaches only package registries, so upstream comes from the Go module
# proxy and is compiled with the local Go, like Kueue (hack/kueue.sh).
# Why not `go install sigs.k8s.io/jobset@version`: the proxy serves the exact version but answers
# 403 to the module's version list (and to newer versions), which `go install` asks for.
# `go mod download` of the exact version works; the module's go.mod has no replace directives, so
# a writable copy of it builds its root `main` package as is.
#
# Usage: hack/upstream-jobset.sh     prints the bin directory on the last line of stdout
#   <cache>/upstream-jobset-<version>/bin/jobset-manager   the controller (upstream's bin/manager)
#   <cache>/upstream-jobset-<version>/crd/*.yaml           its CRD (config/components/crd/bases)
#   <cache>/upstream-jobset-<version>/webhook/*.yaml       webhook configurations and Service
#   <cache>/upstream-jobset-<version>/rbac/*.yaml          its RBAC (config/components/rbac)
#   <cache>/upstream-jobset-<version>/manager/*.yaml       its Deployment and default Configuration
#   <cache>/upstream-jobset-<version>/charts/jobset/       its Helm chart
# Cache root: ${JOBSET_CACHE_DIR:-$XDG_CACHE_HOME/jobset-controller or ~/.cache/jobset-controller}
# Prebuilt: set JOBSET_UPSTREAM_BIN to a bin directory laid out as above (jobset-manager, ../crd,
# ../webhook, ../rbac, ../charts/jobset).
set -euo pipefail

UPSTREAM_VERSION="${UPSTREAM_JOBSET_VERSION:-v0.12.0}"   # the newest version the proxy serves here
MODULE=sigs.k8s.io/jobset

log() { printf '[upstream-jobset] %s\n' "$*" >&2; }
start_ts=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start_ts ))s"; }

complete() {  # $1: a bin directory
  [ -x "$1/jobset-manager" ] && [ -d "$1/../crd" ] && [ -f "$1/../webhook/manifests.yaml" ] \
    && [ -d "$1/../rbac" ] && [ -f "$1/../charts/jobset/Chart.yaml" ]
}

if [ -n "${JOBSET_UPSTREAM_BIN:-}" ] && complete "$JOBSET_UPSTREAM_BIN"; then
  echo "$JOBSET_UPSTREAM_BIN"
  exit 0
fi

cache_root="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
root="$cache_root/upstream-jobset-$UPSTREAM_VERSION"
bin_dir="$root/bin"
if complete "$bin_dir"; then
  echo "$bin_dir"
  exit 0
fi

# One build at a time: two test runs (or a test and a bench) that both find the cache empty
# would otherwise build into the same directory, and the first to finish removed the build tree
# the second was compiling in. The second waits here, then finds the first one's result.
mkdir -p "$cache_root"
exec 9>"$cache_root/.upstream-jobset-$UPSTREAM_VERSION.lock"
flock 9
if complete "$bin_dir"; then
  echo "$bin_dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed, and it is needed once to build $MODULE $UPSTREAM_VERSION."
  log "Install Go >= 1.26, or point JOBSET_UPSTREAM_BIN at a directory with a prebuilt one."
  exit 1
fi

export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# No debug information compiled (-s -w drops it anyway): less CPU, same binary (hack/k8s-binaries.sh).
nodwarf="-gcflags=all=-dwarf=false"
log "building $MODULE $UPSTREAM_VERSION into $bin_dir (the first build takes minutes)"

log "downloading $MODULE@$UPSTREAM_VERSION ..."
info=$(go mod download -json "$MODULE@$UPSTREAM_VERSION")
mod_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")
commit=$(sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)",\{0,1\}$/\1/p' <<<"$info")
if [ -z "$mod_dir" ] || [ ! -f "$mod_dir/go.mod" ]; then
  log "go mod download $MODULE@$UPSTREAM_VERSION gave no module directory"
  exit 1
fi
log "module at $mod_dir ($(elapsed))"

# The module cache is read-only and the build may update go.sum: build in a writable copy.
src="$root/build/jobset"
rm -rf "$src"
mkdir -p "$src" "$bin_dir"
cp -r "$mod_dir/." "$src/"
chmod -R u+w "$src"

log "building the main package (downloads its dependencies first) ..."
ldflags="-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$UPSTREAM_VERSION"
if [ -n "$commit" ]; then
  ldflags="$ldflags -X sigs.k8s.io/jobset/pkg/version.GitCommit=$commit"
fi
(cd "$src" && GOFLAGS=-mod=mod go build -trimpath $nodwarf -ldflags "$ldflags" \
   -o "$bin_dir/jobset-manager.tmp" .)
mv "$bin_dir/jobset-manager.tmp" "$bin_dir/jobset-manager"
log "jobset-manager built ($(elapsed))"

# Manifests and the chart, from the same module: what the tests install or compare against.
for d in crd webhook rbac manager charts; do rm -rf "${root:?}/$d"; done
mkdir -p "$root/crd" "$root/webhook" "$root/rbac" "$root/manager" "$root/charts"
cp "$src/config/components/crd/bases/"*.yaml "$root/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$src/config/components/webhook/service.yaml" \
  "$root/webhook/"
cp "$src/config/components/rbac/"*.yaml "$root/rbac/"
cp "$src/config/components/manager/manager.yaml" \
  "$src/config/components/manager/controller_manager_config.yaml" "$root/manager/"
cp -r "$src/charts/jobset" "$root/charts/jobset"
rm -rf "$root/build"
log "done in $(elapsed); $(du -sh "$bin_dir/jobset-manager" | cut -f1) binary"
echo "$bin_dir"
