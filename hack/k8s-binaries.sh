#!/usr/bin/env bash
# Build (once) and cache the Kubernetes binaries the tests and the dev loop run.
#
# Why build: this machine reaches only package registries, so there is no download site for
# release binaries. Everything comes from the Go module proxy and is compiled with the local Go.
#
# Usage: hack/k8s-binaries.sh [component ...]     prints the bin directory on the last line of stdout
#   components: etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok helm
#               kubelet kube-proxy coredns containerd (the real-node tier's node, cluster DNS and
#               container runtime: containerd, containerd-shim-runc-v2, ctr)
#   (default: all of them)
#
# Cache: ${JOBSET_CACHE_DIR:-$XDG_CACHE_HOME/jobset-controller or ~/.cache/jobset-controller}/k8s-<version>/bin
# Prebuilt binaries: set JOBSET_K8S_BIN (a directory with the binaries) or KUBEBUILDER_ASSETS
# (controller-runtime envtest layout: etcd, kube-apiserver, kubectl in one directory); only the
# components missing there are built.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"     # the newest k8s.io/kubernetes the Go module proxy serves
ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"     # the etcd k8s.io/kubernetes v1.37 pins in its go.mod
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
HELM_VERSION="${HELM_VERSION:-v3.19.0}"    # renders charts/ in the tests
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.7}"  # the real-node tier's cluster DNS
# The real-node tier's CRI runtime. Debian 12's containerd 1.6 does not answer the CRI's
# RuntimeConfig; kubelet 1.37.2 still falls back to its own cgroupDriver then, but counts it as
# losing support in 1.38 (CRILosingSupport{version="1.38.0"}). v2.4 speaks cri-api 0.37.
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"

cache_root="${JOBSET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jobset-controller}"
bin_dir="$cache_root/k8s-$K8S_VERSION/bin"
work_dir="$cache_root/k8s-$K8S_VERSION/build"

all=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok helm kubelet kube-proxy coredns containerd)
kube=(kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy)
if [ "$#" -gt 0 ]; then wanted=("$@"); else wanted=("${all[@]}"); fi

log() { printf '[k8s-binaries] %s\n' "$*" >&2; }
start_ts=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start_ts ))s"; }

# A component is present if a prebuilt directory has it, or our cache has it.
find_prebuilt() {
  local name="$1" dir
  for dir in "${JOBSET_K8S_BIN:-}" "${KUBEBUILDER_ASSETS:-}"; do
    if [ -n "$dir" ] && [ -x "$dir/$name" ]; then echo "$dir/$name"; return 0; fi
  done
  return 1
}

mkdir -p "$bin_dir"
missing=()
for c in "${wanted[@]}"; do
  case "$c" in etcd|kube-apiserver|kubectl|kube-controller-manager|kube-scheduler|kwok|helm|kubelet|kube-proxy|coredns|containerd) ;;
    *) log "unknown component '$c' (known: ${all[*]})"; exit 2 ;; esac
  if p=$(find_prebuilt "$c"); then
    # A prebuilt directory may be this cache itself (JOBSET_K8S_BIN as test-env.sh exports it).
    [ "$p" -ef "$bin_dir/$c" ] || ln -sf "$p" "$bin_dir/$c"
    [ "$c" = etcd ] && [ -x "$(dirname "$p")/etcdctl" ] && ! [ "$(dirname "$p")/etcdctl" -ef "$bin_dir/etcdctl" ] \
      && ln -sf "$(dirname "$p")/etcdctl" "$bin_dir/etcdctl"
    continue
  fi
  if [ ! -x "$bin_dir/$c" ] || { [ "$c" = etcd ] && [ ! -x "$bin_dir/etcdctl" ]; } \
     || { [ "$c" = containerd ] && { [ ! -x "$bin_dir/ctr" ] || [ ! -x "$bin_dir/containerd-shim-runc-v2" ]; }; }; then
    missing+=("$c")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "$bin_dir"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go is not installed, and it is needed once to build: ${missing[*]}."
  log "Install Go >= 1.26 (https://go.dev/doc/install, or your package manager), or point"
  log "JOBSET_K8S_BIN / KUBEBUILDER_ASSETS at a directory with prebuilt binaries."
  exit 1
fi

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# No debug information is compiled: -ldflags "-s -w" drops it at link anyway, so the binaries are
# the same, and a cold build takes about 14% less CPU (kwok alone: 152 s of CPU against 177 s).
nodwarf="-gcflags=all=-dwarf=false"
log "building ${missing[*]} into $bin_dir (first build takes several minutes; later runs reuse it)"

has() { local x; for x in "${missing[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

# A throwaway module in $1 named $2 whose tools.go imports the packages $3..., so `go mod tidy`
# resolves exactly what the build needs.
throwaway_module() {
  local d="$1" name="$2" pkg
  shift 2
  mkdir -p "$d"
  printf 'module jobset-controller.local/%s\n\ngo 1.24\n' "$name" >"$d/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for pkg in "$@"; do printf '\t_ "%s"\n' "$pkg"; done
    printf ')\n'
  } >"$d/tools.go"
}

build_etcd() {
  local d="$work_dir/etcd"
  throwaway_module "$d" etcdbuild go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/server/v3
  (cd "$d" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "go.etcd.io/etcd/etcdctl/v3@$ETCD_VERSION" >&2 \
     && go mod tidy >&2 \
     && go build -trimpath $nodwarf -ldflags "-s -w" -o "$bin_dir/etcd" go.etcd.io/etcd/server/v3 \
     && go build -trimpath $nodwarf -ldflags "-s -w" -o "$bin_dir/etcdctl" go.etcd.io/etcd/etcdctl/v3)
  log "etcd $ETCD_VERSION built ($(elapsed))"
}

# k8s.io/kubernetes replaces its k8s.io/* staging modules with local paths, so it cannot be
# `go install`ed. A throwaway module requires it and pins each staging module to v0.<minor>.<patch>.
build_kube() {
  local d="$work_dir/kube" pkgs=() c
  mkdir -p "$d"
  local mod_dir
  mod_dir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  local staging_version="v0.${K8S_VERSION#v1.}"
  {
    echo "module jobset-controller.local/kubebuild"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    grep -E '^[[:space:]]+k8s\.io/[a-z0-9-]+ => \./staging/' "$mod_dir/go.mod" \
      | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$d/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for c in "${kube[@]}"; do
      has "$c" && echo "	_ \"k8s.io/kubernetes/cmd/$c\""
    done
    echo ")"
  } >"$d/tools.go"
  (cd "$d" && go mod tidy >&2)
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local ld="-s -w"
  local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for c in "${kube[@]}"; do
    has "$c" || continue
    log "building $c $K8S_VERSION ..."
    (cd "$d" && go build -trimpath $nodwarf -ldflags "$ld" -o "$bin_dir/$c" "k8s.io/kubernetes/cmd/$c")
    log "$c built ($(elapsed))"
  done
}

build_kwok() {
  local d="$work_dir/kwok"
  throwaway_module "$d" kwokbuild sigs.k8s.io/kwok/cmd/kwok
  (cd "$d" && go get "sigs.k8s.io/kwok@$KWOK_VERSION" >&2 && go mod tidy >&2 \
     && go build -trimpath $nodwarf -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
          -o "$bin_dir/kwok" sigs.k8s.io/kwok/cmd/kwok)
  log "kwok $KWOK_VERSION built ($(elapsed))"
}

build_helm() {
  # helm's module has no replace directives, so `go install` works directly.
  GOBIN="$bin_dir" go install $nodwarf "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
  log "helm $HELM_VERSION built ($(elapsed))"
}

build_coredns() {
  # Only the plugins the real-node tier's Corefile uses (bind, errors, kubernetes), compiled into
  # a main of our own: CoreDNS's default build links every plugin, with the cloud SDKs of route53,
  # azure and clouddns, and takes several times longer to compile on a cold machine.
  local d="$work_dir/coredns"
  mkdir -p "$d"
  # The requirement is written, not `go get`: getting the module's root package would load
  # CoreDNS's own main, and with it every plugin's dependencies.
  printf 'module jobset-controller.local/corednsbuild\n\ngo 1.24\n\nrequire github.com/coredns/coredns %s\n' \
    "$COREDNS_VERSION" >"$d/go.mod"
  {
    echo "// CoreDNS with the three plugins the real-node tier's Corefile names, in that order."
    echo "package main"
    echo
    echo "import ("
    echo "	\"github.com/coredns/coredns/core/dnsserver\""
    echo "	\"github.com/coredns/coredns/coremain\""
    echo "	_ \"github.com/coredns/coredns/plugin/bind\""
    echo "	_ \"github.com/coredns/coredns/plugin/errors\""
    echo "	_ \"github.com/coredns/coredns/plugin/kubernetes\""
    echo ")"
    echo
    echo "func init() { dnsserver.Directives = []string{\"bind\", \"errors\", \"kubernetes\"} }"
    echo
    echo "func main() { coremain.Run() }"
  } >"$d/main.go"
  (cd "$d" && go mod tidy >&2 \
     && go build -trimpath $nodwarf -ldflags "-s -w" -o "$bin_dir/coredns" .)
  log "coredns $COREDNS_VERSION built ($(elapsed))"
}

build_containerd() {
  # containerd's go.mod has no replace directives, so `go install` builds the three commands as
  # released. The tags leave out the btrfs and devmapper snapshotters (C headers; the node uses
  # overlayfs).
  local c
  for c in containerd containerd-shim-runc-v2 ctr; do
    GOBIN="$bin_dir" go install -trimpath $nodwarf -tags no_btrfs,no_devmapper \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
      "github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION" >&2
  done
  log "containerd $CONTAINERD_VERSION built ($(elapsed))"
}

# The groups build at the same time: each one's module downloads wait on the network and each
# binary's link uses one core, so one at a time left a core idle for much of a cold build. Go's
# module and build caches are safe for concurrent use. A failed group fails the script.
pids=()
has etcd && { build_etcd & pids+=($!); }
for c in "${kube[@]}"; do
  if has "$c"; then { build_kube & pids+=($!); }; break; fi
done
has kwok && { build_kwok & pids+=($!); }
has helm && { build_helm & pids+=($!); }
has coredns && { build_coredns & pids+=($!); }
has containerd && { build_containerd & pids+=($!); }
for pid in "${pids[@]}"; do wait "$pid"; done
log "done in $(elapsed); cache size $(du -sh "$cache_root/k8s-$K8S_VERSION" | cut -f1)"
echo "$bin_dir"
