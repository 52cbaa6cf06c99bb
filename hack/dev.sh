#!/usr/bin/env bash
# The dev loop. For now it starts the local control plane (etcd + kube-apiserver with the JobSet
# CRD) and prints its kubeconfig; the controller, the full cluster (controller-manager, scheduler,
# kwok nodes) and the example JobSet join as their issues land. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install --quiet -e '.[test]'
fi
echo "note: the controller is not wired in yet; this brings up the control plane only." >&2
exec .venv/bin/python -m jobset_controller.envtest
