#!/usr/bin/env bash
# The one test command (README, `make test`, CI): installs what it needs, then lint, types, tests.
#
#   1. a virtualenv in .venv with the project and its test extras (pip's cache makes reruns fast);
#   2. the Kubernetes binaries, Kueue and upstream's JobSet controller, built once from their Go
#      modules and cached outside the repo (hack/k8s-binaries.sh, hack/kueue.sh,
#      hack/upstream-jobset.sh), and the controller image with podman (hack/image.sh, in the
#      background beside those builds; Debian packages installed by hack/node-packages.sh);
#   3. ruff (lint + format check), mypy (strict), the import contracts (lint-imports, from
#      pyproject.toml), pytest (unit + integration + e2e).
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"` or `-k crd`.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${JOBSET_VENV:-.venv}"
python="${PYTHON:-python3}"
step() { printf '\n==> %s\n' "$*"; }

step "python environment ($venv)"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
stamp="$venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e '.[test]'
  touch "$stamp"
fi

step "controller image (the real-node tier), in the background"
# The image the `node` tests install (Dockerfile, built with podman from a Debian base: no
# registry). Its build waits mostly on apt and the disk, so on a cold machine it runs beside the
# Go builds below instead of after them; the tests start only once it is done.
image_out=$(mktemp)
hack/image.sh >"$image_out" &
image_pid=$!

step "kubernetes binaries"
bin_dir=$(hack/k8s-binaries.sh | tail -n 1)  # all components: e2e needs the full cluster
echo "using $bin_dir"
export JOBSET_K8S_BIN="$bin_dir"

step "kueue"
kueue_dir=$(hack/kueue.sh | tail -n 1)  # Kueue's manager for the `kueue` e2e tests, built once
echo "using $kueue_dir"
export JOBSET_KUEUE_BIN="$kueue_dir"

step "upstream jobset"
# Upstream's controller v0.12.0, its manifests and chart (the differential, swap and chart-swap
# tests run it as the other side), built once from the Go module proxy like Kueue.
upstream_dir=$(hack/upstream-jobset.sh | tail -n 1)
echo "using $upstream_dir"
export JOBSET_UPSTREAM_BIN="$upstream_dir"

step "controller image: waiting for the build"
wait "$image_pid"
export JOBSET_IMAGE=$(tail -n 1 "$image_out")
export JOBSET_IMAGE_ARCHIVES=$(tail -n 3 "$image_out" | head -n 2 | paste -sd:)
rm -f "$image_out"
echo "using $JOBSET_IMAGE"

step "prometheus and promtool"
prometheus_dir=$(hack/prometheus.sh | tail -n 1)  # Debian's package, unpacked into the cache
echo "using $prometheus_dir"
export JOBSET_PROMETHEUS_BIN="$prometheus_dir"

# Every test talks to 127.0.0.1 only: make sure no proxy from the environment ever sees it.
export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}"
export no_proxy="$NO_PROXY"

step "ruff"
"$venv/bin/ruff" check src tests hack
"$venv/bin/ruff" format --check src tests hack

step "mypy"
"$venv/bin/mypy"

step "import contracts"
"$venv/bin/lint-imports" --no-cache

step "pytest"
"$venv/bin/pytest" "$@"
