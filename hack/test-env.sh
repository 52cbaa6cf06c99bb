# Sourced by hack/test.sh and hack/flaky.sh: what the tests need, made or reused, as exports.
#
#   test_venv    a virtualenv in $JOBSET_VENV (default .venv) with the project and its test
#                extras, made again only when pyproject.toml changed (pip's cache keeps it fast);
#   test_tools   the Kubernetes binaries, Kueue and upstream's JobSet controller, built once from
#                their Go modules and cached outside the repo (hack/k8s-binaries.sh,
#                hack/kueue.sh, hack/upstream-jobset.sh), the controller image with podman
#                (hack/image.sh, in the background beside those builds) and Prometheus
#                (hack/prometheus.sh); exports JOBSET_K8S_BIN, JOBSET_KUEUE_BIN,
#                JOBSET_UPSTREAM_BIN, JOBSET_IMAGE, JOBSET_IMAGE_ARCHIVES, JOBSET_PROMETHEUS_BIN.
# The caller has `set -euo pipefail` and runs from the repository's root.

venv="${JOBSET_VENV:-.venv}"
python="${PYTHON:-python3}"
step() { printf '\n==> %s\n' "$*"; }

test_venv() {
  step "python environment ($venv)"
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
  fi
  local stamp
  stamp="$venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e '.[test]'
    touch "$stamp"
  fi
}

test_tools() {
  step "controller image (the real-node tier), in the background"
  # The image the `node` tests install (Dockerfile, built with podman from a Debian base: no
  # registry). Its build waits mostly on apt and the disk, so on a cold machine it runs beside
  # the Go builds below instead of after them; the tests start only once it is done.
  local image_out image_pid
  image_out=$(mktemp)
  hack/image.sh >"$image_out" &
  image_pid=$!

  step "kubernetes binaries"
  JOBSET_K8S_BIN=$(hack/k8s-binaries.sh | tail -n 1)  # all components: e2e needs the full cluster
  export JOBSET_K8S_BIN
  echo "using $JOBSET_K8S_BIN"

  step "kueue"
  JOBSET_KUEUE_BIN=$(hack/kueue.sh | tail -n 1)  # Kueue's manager for the `kueue` e2e tests
  export JOBSET_KUEUE_BIN
  echo "using $JOBSET_KUEUE_BIN"

  step "kubeflow trainer"
  JOBSET_TRAINER_BIN=$(hack/trainer.sh | tail -n 1)  # Trainer v2.0.0 for the `trainer` e2e tests
  export JOBSET_TRAINER_BIN
  echo "using $JOBSET_TRAINER_BIN"

  step "upstream jobset"
  # Upstream's controller v0.12.0, its manifests and chart (the differential, swap and
  # chart-swap tests run it as the other side), built once from the Go module proxy like Kueue.
  JOBSET_UPSTREAM_BIN=$(hack/upstream-jobset.sh | tail -n 1)
  export JOBSET_UPSTREAM_BIN
  echo "using $JOBSET_UPSTREAM_BIN"

  step "controller image: waiting for the build"
  wait "$image_pid"
  JOBSET_IMAGE=$(tail -n 1 "$image_out")
  JOBSET_IMAGE_ARCHIVES=$(tail -n 3 "$image_out" | head -n 2 | paste -sd:)
  export JOBSET_IMAGE JOBSET_IMAGE_ARCHIVES
  rm -f "$image_out"
  echo "using $JOBSET_IMAGE"

  step "prometheus and promtool"
  JOBSET_PROMETHEUS_BIN=$(hack/prometheus.sh | tail -n 1)  # Debian's package, unpacked
  export JOBSET_PROMETHEUS_BIN
  echo "using $JOBSET_PROMETHEUS_BIN"

  # Every test talks to 127.0.0.1 only: make sure no proxy from the environment ever sees it.
  export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}"
  export no_proxy="$NO_PROXY"
}
