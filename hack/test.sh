#!/usr/bin/env bash
# The one test command (README, `make test`, CI): installs what it needs, then lint, types, tests.
#
#   1. a virtualenv in .venv with the project and its test extras (pip's cache makes reruns fast);
#   2. the Kubernetes binaries and Kueue, built once from their Go modules and cached outside the
#      repo (hack/k8s-binaries.sh, hack/kueue.sh), and the controller image with podman
#      (hack/image.sh; Debian packages installed by hack/node-packages.sh);
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

step "kubernetes binaries"
bin_dir=$(hack/k8s-binaries.sh | tail -n 1)  # all components: e2e needs the full cluster
echo "using $bin_dir"
export JOBSET_K8S_BIN="$bin_dir"

step "kueue"
kueue_dir=$(hack/kueue.sh | tail -n 1)  # Kueue's manager for the `kueue` e2e tests, built once
echo "using $kueue_dir"
export JOBSET_KUEUE_BIN="$kueue_dir"

step "controller image (the real-node tier)"
# The image the `node` tests install (Dockerfile, built with podman from a Debian base: no
# registry). Like the binaries, built before the tests start: it needs both cores.
image_lines=$(hack/image.sh)
export JOBSET_IMAGE=$(echo "$image_lines" | tail -n 1)
export JOBSET_IMAGE_ARCHIVES=$(echo "$image_lines" | tail -n 3 | head -n 2 | paste -sd:)
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
