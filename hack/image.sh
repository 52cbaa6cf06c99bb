#!/usr/bin/env bash
# Builds the controller image for one or more architectures from the repository's Dockerfile,
# without any image registry, network or emulation, and joins them in a manifest list:
#
#   hack/image.sh [--arch amd64,arm64]      (default: this machine's architecture)
#
#   1. per architecture, the runtime base (Python 3.11, its libraries, CA certificates; no shell,
#      no package manager): Debian 12's packages for that architecture unpacked by
#      `mmdebstrap --variant=extract` (no maintainer script runs, so nothing is emulated), cut
#      down by src/jobset_controller_dev/image/rootfs.py and imported into podman (cached, keyed
#      by the package list and that script);
#   2. the dependencies' wheels for each architecture's platform (CPython 3.11, manylinux,
#      glibc <= 2.36), fetched on the host with `pip download --platform` into a directory keyed
#      by pyproject.toml (pip's cache already holds most of them), with the build tools (hatchling
#      for the project's wheel, PyPA's installer for the build stage);
#   3. the project's wheel, built on the host from those;
#   4. per architecture, the product's venv assembled from those wheels by
#      src/jobset_controller_dev/image/assemble.py, run in a container of THIS machine's base
#      (native speed) with the target's standard library mounted beside it, then
#      `podman build --platform linux/<arch> --network none` of the Dockerfile (the base plus
#      that tree; no RUN step); tagged with a hash of every input and its base's id, so an
#      unchanged tree is not built again, and as `localhost/jobset-controller:<key>-<arch>`;
#   5. the manifest list `localhost/jobset-controller:<key>` of those images, saved with
#      `podman manifest push --all` as an OCI archive (what a registry, `skopeo copy --all` or
#      containerd's `ctr images import` take), and the pod sandbox image `localhost/pause:local`
#      (hack/image/pause.c, static, FROM scratch) as a docker archive, for the real-node tier.
# Prints the build times and each image's size to stderr, then the pause archive, the OCI
# archive, then (last line) the manifest list's name. podman uses the project's own configuration
# and storage (hack/podman-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

host_arch=$(dpkg --print-architecture)
arches="$host_arch"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arches="$2"; shift 2 ;;
    --arch=*) arches="${1#--arch=}"; shift ;;
    *) echo "usage: hack/image.sh [--arch amd64,arm64]" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a arch_list <<<"$arches"

hack/node-packages.sh
. hack/podman-env.sh
dir="$cache/image"
mkdir -p "$dir"
say() { echo "[image] $*" >&2; }
seconds_since() { local t=$((($(date +%s%N) - $1) / 100000000)); echo "$((t / 10)).$((t % 10)) s"; }
py="${JOBSET_VENV:-.venv}/bin/python"
[ -x "$py" ] || py=python3

# pip's platform tag and Debian's multiarch name for each architecture Go names.
machine_of() {
  case "$1" in
    amd64) echo x86_64 ;; arm64) echo aarch64 ;; s390x) echo s390x ;;
    *) echo "hack/image.sh: unsupported architecture $1 (amd64, arm64, s390x)" >&2; exit 2 ;;
  esac
}
for arch in "${arch_list[@]}"; do machine_of "$arch" >/dev/null; done

# 1. The runtime bases. The package list's dependencies come along (libc, libssl, ...); the
# rootfs script keeps only what Python and the wheels load.
suite=bookworm
packages=python3.11-minimal,libpython3.11-stdlib,ca-certificates,libstdc++6,base-files
base_key=$(
  { echo "$suite $packages"; cat src/jobset_controller_dev/image/rootfs.py src/jobset_controller_dev/image/elf.py; } |
    sha256sum | cut -c1-12
)
base_of() { echo "localhost/jobset-python:$suite-$1-$base_key"; }
make_base() {
  local arch=$1 base tree tar started
  base=$(base_of "$arch")
  podman image exists "$base" && return 0
  started=$(date +%s%N)
  tar="$dir/base-$suite-$arch-$base_key.tar"
  if [ ! -f "$tar" ]; then
    tree=$(mktemp -d "$dir/extract-$arch.XXXXXX")
    say "unpacking Debian $suite's packages for $arch (mmdebstrap --variant=extract)"
    mmdebstrap --quiet --variant=extract --architectures="$arch" --include="$packages" \
      "$suite" "$tree" >&2
    PYTHONPATH=src "$py" -m jobset_controller_dev.image.rootfs "$tree" --arch "$arch" \
      --out "$tar.tmp"
    rm -rf "$tree"
    mv "$tar.tmp" "$tar"
  fi
  podman import --quiet --arch "$arch" --os linux "$tar" "$base" >/dev/null
  rm -f "$dir"/base-"$suite"-"$arch"-*.tar.old
  say "$arch base made in $(seconds_since "$started")"
}
for arch in $(printf '%s\n' "$host_arch" "${arch_list[@]}" | sort -u); do make_base "$arch"; done

# 2. The wheels: the dependencies per platform, the build tools once.
wheels="$dir/wheels-$(cat pyproject.toml src/jobset_controller/__init__.py | sha256sum | cut -c1-12)"
fetch_wheels() {
  local arch=$1 machine tags glibc_minor
  [ -f "$wheels/$arch/.complete" ] && return 0
  machine=$(machine_of "$arch")
  say "fetching the dependencies' wheels for $arch into $wheels/$arch"
  # pip does not widen a manylinux_2_X platform to older glibc versions: each is named.
  tags=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311
        --platform "manylinux2014_$machine")
  for glibc_minor in $(seq 17 36); do tags+=(--platform "manylinux_2_${glibc_minor}_$machine"); done
  rm -rf "$wheels/$arch" && mkdir -p "$wheels/$arch"
  "$py" -m pip download --quiet --disable-pip-version-check "${tags[@]}" -d "$wheels/$arch" \
    "$wheels"/tools/jobset_controller-*.whl >&2
  rm -f "$wheels/$arch"/jobset_controller-*.whl
  touch "$wheels/$arch/.complete"
}
if [ ! -f "$wheels/tools/.complete" ]; then
  rm -rf "$dir"/wheels-* && mkdir -p "$wheels/tools"
  say "fetching the build tools' wheels into $wheels/tools"
  # The version of `installer` the project's venv has (pyproject's `release` extra): one owner.
  installer_version=$("$py" -c 'import importlib.metadata as m; print(m.version("installer"))')
  "$py" -m pip download --quiet --disable-pip-version-check --only-binary=:all: -d "$wheels/tools" \
    'hatchling>=1.25' "installer==$installer_version" >&2
  # A wheel of the project as it is now: pip download reads its dependencies from it.
  "$py" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-index \
    --find-links "$wheels/tools" -w "$wheels/tools" . >&2
  touch "$wheels/tools/.complete"
fi
for arch in "${arch_list[@]}"; do fetch_wheels "$arch"; done

# 3.-4. The images, keyed by every input. `source_key` hashes what every architecture's image is
# made from (the wheels' directory, the Dockerfile, the sources, the assembly and the machine's own
# base that runs it); each architecture's image is tagged with it and its own base's id, so one
# built beside other architectures is found again when built alone, and the other way round.
source_key=$(
  {
    podman image inspect --format '{{.Id}}' "$(base_of "$host_arch")"
    basename "$wheels"
    sha256sum Dockerfile .dockerignore pyproject.toml README.md hack/image/cluster-modules.txt \
      src/jobset_controller_dev/image/assemble.py
    find src/jobset_controller -type f \( -name '*.py' -o -name py.typed \) -print0 | sort -z |
      xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
own_of() {
  local base_id
  base_id=$(podman image inspect --format '{{.Id}}' "$(base_of "$1")")
  echo "localhost/jobset-controller:s$source_key-${base_id:0:12}-$1"
}
# The list's key: its architectures' images, in the order given.
key=$(for arch in "${arch_list[@]}"; do own_of "$arch"; done | sha256sum | cut -c1-16)
name="localhost/jobset-controller:$key"
build() {
  local arch=$1 own project tree stdlib started
  own=$(own_of "$arch")
  if podman image exists "$own"; then
    podman tag "$own" "$name-$arch"
    return 0
  fi
  if [ ! -d "$dir/project-$source_key" ]; then
    project=$(mktemp -d "$dir/project.XXXXXX")
    "$py" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-index \
      --find-links "$wheels/tools" -w "$project" . >&2
    rm -rf "$dir"/project-* 2>/dev/null || true
    mv "$project" "$dir/project-$source_key"
  fi
  say "building $own"
  started=$(date +%s%N)
  # The venv, assembled by this machine's Python with the target's standard library beside it.
  tree=$(mktemp -d "$dir/venv-$arch.XXXXXX")
  stdlib="$(podman image mount "$(base_of "$arch")")/usr/lib/python3.11"
  podman run --rm --quiet --pull=never --network none --user 0 \
    -e PYTHONPATH=/tools/installer.whl -e PYTHONDONTWRITEBYTECODE=1 \
    -v "$wheels/$arch:/wheels/deps:ro" -v "$dir/project-$source_key:/wheels/project:ro" \
    -v "$(ls "$wheels"/tools/installer-*.whl):/tools/installer.whl:ro" \
    -v "$PWD/src/jobset_controller_dev/image/assemble.py:/build/assemble.py:ro" \
    -v "$PWD/hack/image/cluster-modules.txt:/build/cluster-modules.txt:ro" \
    -v "$stdlib:/target/python3.11:ro" -v "$tree:/out" \
    --entrypoint /usr/bin/python3.11 "$(base_of "$host_arch")" /build/assemble.py \
    --wheels /wheels/deps /wheels/project --modules /build/cluster-modules.txt \
    --target-stdlib /target/python3.11 --out /out >&2
  podman image unmount "$(base_of "$arch")" >/dev/null
  podman build --quiet --pull=never --network none --platform "linux/$arch" \
    --build-arg "BASE=$(base_of "$arch")" --build-context "venv=$tree" -t "$own" . >&2
  podman tag "$own" "$name-$arch"
  rm -rf "$tree"
  say "$arch built in $(seconds_since "$started")"
}
for arch in "${arch_list[@]}"; do build "$arch"; done

# 5. The manifest list and its OCI archive.
archive="$dir/jobset-controller-$key-$(IFS=-; echo "${arch_list[*]}").oci.tar"
if [ ! -f "$archive" ]; then
  started=$(date +%s%N)
  podman manifest rm "$name" >/dev/null 2>&1 || true
  podman manifest create "$name" >/dev/null
  for arch in "${arch_list[@]}"; do
    podman manifest add --arch "$arch" --os linux "$name" "containers-storage:$name-$arch" >/dev/null
  done
  rm -f "$dir"/jobset-controller-*.oci.tar
  podman manifest push --quiet --all --format oci "$name" "oci-archive:$archive.tmp:$name" >&2
  mv "$archive.tmp" "$archive"
  say "manifest list and OCI archive written in $(seconds_since "$started")"
  # Earlier trees' images and lists: only this tree's are kept (every architecture's).
  podman images --filter reference=localhost/jobset-controller --format '{{.Repository}}:{{.Tag}}' |
    grep -v -e ":$key" -e ":s$source_key-" | xargs -r podman rmi --force >/dev/null 2>&1 || true
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

for arch in "${arch_list[@]}"; do
  size=$(podman image inspect --format '{{.Size}}' "$name-$arch")
  say "$arch: $name-$arch, $((size / 1000000)) MB"
done
echo "$pause_archive"
echo "$archive"
echo "$name"
