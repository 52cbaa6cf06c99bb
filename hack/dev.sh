#!/usr/bin/env bash
# The dev loop (README's first command): a full local cluster (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok nodes), the controller, and an example JobSet whose
# progress is printed until it completes. Everything stays up until Ctrl-C.
#   hack/dev.sh [--example examples/coordinator.yaml] [--exit-when-done]
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=".venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test]'
  touch "$stamp"
fi
exec .venv/bin/python -m jobset_controller_dev.devloop "$@"
