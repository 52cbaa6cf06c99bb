#!/usr/bin/env bash
# Builds the controller image from the repository's Dockerfile, without any image registry:
#   1. a Debian 12 base with python3 + python3-venv, made from Debian's packages by mmdebstrap
#      and imported into podman (cached: made once);
#   2. `podman build --build-arg BASE=<that base>` (pip reaches PyPI through the host network,
#      with the host's CA bundle and pip.conf mounted read-only), tagged by a key of its inputs
#      (the Dockerfile, pyproject.toml, README.md, src/jobset_controller, the base), so an
#      unchanged tree is not built again;
#   3. `podman save` of it as a docker archive beside the cache (what containerd imports), and of
#      the pod sandbox image `localhost/pause:local` (hack/image/pause.c, static, FROM scratch).
# Prints the build time and the image size to stderr, then the pause archive, the controller
# archive, then (last line) the controller image name. podman uses the project's own configuration and storage (hack/podman-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/node-packages.sh
. hack/podman-env.sh
dir="$cache/image"
mkdir -p "$dir"
say() { echo "[image] $*" >&2; }

suite=bookworm
base="localhost/jobset-base:$suite"
if ! podman image exists "$base"; then
  if [ ! -f "$dir/base-$suite.tar" ]; then
    say "making the $suite base with mmdebstrap"
    mmdebstrap --quiet --format=tar --variant=minbase --include=python3,python3-venv,ca-certificates \
      "$suite" "$dir/base-$suite.tar.tmp" >&2
    mv "$dir/base-$suite.tar.tmp" "$dir/base-$suite.tar"
  fi
  podman import --quiet "$dir/base-$suite.tar" "$base" >/dev/null
fi

key=$(
  {
    podman image inspect --format '{{.Id}}' "$base"
    sha256sum Dockerfile pyproject.toml README.md .dockerignore
    find src/jobset_controller -type f -name '*.py' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
image="localhost/jobset-controller:$key"
archive="$dir/jobset-controller-$key.tar"
if ! podman image exists "$image"; then
  say "building $image"
  mounts=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
  [ -f /etc/pip.conf ] && mounts+=(-v /etc/pip.conf:/etc/pip.conf:ro)
  started=$(date +%s%N)
  podman build --quiet --network host "${mounts[@]}" --build-arg "BASE=$base" -t "$image" . >&2
  elapsed=$((($(date +%s%N) - started) / 100000000))
  say "built in $((elapsed / 10)).$((elapsed % 10)) s"
  # Earlier trees' images: only the newest is kept (each is ~400 MB of storage).
  podman images --filter reference=localhost/jobset-controller --format '{{.Repository}}:{{.Tag}}' |
    grep -v ":$key\$" | xargs -r podman rmi --force >/dev/null 2>&1 || true
fi
if [ ! -f "$archive" ]; then
  rm -f "$dir"/jobset-controller-*.tar
  podman save --quiet --format docker-archive -o "$archive.tmp" "$image"
  mv "$archive.tmp" "$archive"
fi
# The pod sandbox image the real-node tier's containerd runs (its `sandbox_image`).
pause="localhost/pause:local"
pause_archive="$dir/pause.tar"
if [ ! -f "$pause_archive" ] || [ hack/image/pause.c -nt "$pause_archive" ]; then
  ctx=$(mktemp -d)
  gcc -static -O2 -o "$ctx/pause" hack/image/pause.c
  cp hack/image/Containerfile.pause "$ctx/Containerfile"
  podman build --quiet --network host -t "$pause" "$ctx" >/dev/null
  rm -rf "$ctx"
  podman save --quiet --format docker-archive -o "$pause_archive.tmp" "$pause"
  mv "$pause_archive.tmp" "$pause_archive"
fi

size=$(podman image inspect --format '{{.Size}}' "$image")
say "size $((size / 1000000)) MB (base $(( $(podman image inspect --format '{{.Size}}' "$base") / 1000000 )) MB)"
echo "$pause_archive"
echo "$archive"
echo "$image"
