#!/usr/bin/env bash
# The suite's Python-dependent parts again on every other CPython the project supports
# (requires-python >= 3.11; the release image's default base is 3.12, Debian 13's python3 is 3.13):
# the unit tier, and the integration tests of what talks TLS (the API client and its kubeconfig
# contexts, the webhook server, internal certificates, secure metrics).
#
#   hack/test-pythons.sh [--part unit|after-tools] [pytest args]
#
# hack/test.sh runs it in two parts: `unit` (the unit tier without the tests that run a built tool,
# marked `tools`) while the tools build, `after-tools` (those and the TLS integration tests) after
# the main run. Without --part: both at once.
#
# Each interpreter found that runs (python3.X on PATH, else pyenv's newest 3.X.*) other than the main
# one gets a virtualenv of its own, .venv-3.X, made again only when pyproject.toml changed.
# An interpreter not found is said, not failed: the machines differ; the line names it.
# Needs the tools hack/test-env.sh exports (JOBSET_K8S_BIN for the integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."

integration=(
  tests/integration/test_client.py
  tests/integration/test_webhooks.py
  tests/integration/test_internal_certificates.py
  tests/integration/test_metrics_security.py
)
part=all
if [ "${1:-}" = --part ]; then
  part=${2:?"hack/test-pythons.sh: --part needs unit or after-tools"}
  shift 2
fi
trap 'exit 130' INT  # Ctrl-C stops every interpreter's run, not only the current one
case "$part" in
  all) selection=(tests/unit "${integration[@]}"); what="unit tier and TLS integration tests" ;;
  unit) selection=(tests/unit -m "not tools"); what="unit tier (without the tests that run a built tool)" ;;
  after-tools) selection=(tests/unit "${integration[@]}" -m "tools or integration")
    what="unit tests that run a built tool, and TLS integration tests" ;;
  *) echo "hack/test-pythons.sh: unknown part '$part' (unit, after-tools)" >&2; exit 2 ;;
esac

main_version=$("${JOBSET_VENV:-.venv}/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
versions=(${JOBSET_TEST_PYTHONS:-3.11 3.12 3.13})

runs_as() {  # does interpreter $1 start, and is it version $2? (a pyenv shim for a version
  # pyenv has but has not activated is on PATH and fails: "pyenv: python3.12: command not found")
  [ "$("$1" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null)" = "$2" ]
}

find_python() {  # the interpreter for version $1, or nothing
  local version=$1 candidate
  if candidate=$(command -v "python$version" 2>/dev/null) && runs_as "$candidate" "$version"; then
    echo "$candidate"
    return
  fi
  for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".* 2>/dev/null | sort -V -r); do
    if [ -x "$candidate/bin/python$version" ] && runs_as "$candidate/bin/python$version" "$version"; then
      echo "$candidate/bin/python$version"
      return
    fi
  done
}

status=0
for version in "${versions[@]}"; do
  [ "$version" = "$main_version" ] && continue
  interpreter=$(find_python "$version")
  if [ -z "$interpreter" ]; then
    echo "==> python $version: not found on this machine (PATH, pyenv): not run"
    continue
  fi
  echo "==> python $version ($interpreter): $what"
  JOBSET_VENV=".venv-$version" PYTHON="$interpreter" bash -c '
    set -euo pipefail
    . hack/test-env.sh
    test_venv >/dev/null
  '
  if ! ".venv-$version/bin/pytest" -p no:cacheprovider -q -n "${JOBSET_TEST_WORKERS:-4}" \
      --dist loadscope "${selection[@]}" "$@"; then
    status=1
  fi
done
exit $status
