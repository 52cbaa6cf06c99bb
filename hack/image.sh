#!/usr/bin/env bash
# Builds the controller image from the repository's Dockerfile, without any image registry:
#   1. a Debian 12 base with python3 + python3-venv, made from Debian's packages by mmdebstrap
#      and imported into podman (cached: made once);
#   2. the wheels of the product's dependencies and of its build backend, for the base's Python
#      (cp311, manylinux, x86_64), fetched on the host with pip (its cache already holds them after
#      the test venv is made) into a directory keyed by pyproject.toml;
#   3. `podman build --build-arg BASE=<that base>` with that directory mounted at /wheels and
#      `PIP_OPTIONS=--no-index --find-links /wheels`, so the build downloads nothing; tagged by a
#      key of its inputs (the Dockerfile, pyproject.toml, README.md, src/jobset_controller, the
#      base), so an unchanged tree is not built again;
#   4. `podman save` of it as a docker archive beside the cache (what containerd imports), and of
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

# The dependencies' wheels. The base is Debian 12: CPython 3.11, glibc 2.36.
wheels="$dir/wheels-$(sha256sum pyproject.toml | cut -c1-12)"
if [ ! -f "$wheels/.complete" ]; then
  say "fetching the dependencies' wheels into $wheels"
  py="${JOBSET_VENV:-.venv}/bin/python"
  [ -x "$py" ] || py=python3
  rm -rf "$dir"/wheels-* && mkdir -p "$wheels/project"
  # pip does not widen a manylinux_2_X platform to older glibc versions: each is named.
  tags=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311
        --platform manylinux2014_x86_64)
  for glibc_minor in $(seq 17 36); do tags+=(--platform "manylinux_2_${glibc_minor}_x86_64"); done
  "$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$wheels/project" . >&2
  "$py" -m pip download --quiet --disable-pip-version-check "${tags[@]}" -d "$wheels" \
    "$wheels"/project/*.whl 'hatchling>=1.25' >&2
  rm -rf "$wheels/project" "$wheels"/jobset_controller-*.whl
  touch "$wheels/.complete"
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
  started=$(date +%s%N)
  podman build --quiet --network none -v "$wheels:/wheels:ro" --build-arg "BASE=$base" \
    --build-arg "PIP_OPTIONS=--no-index --find-links /wheels" -t "$image" . >&2
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
