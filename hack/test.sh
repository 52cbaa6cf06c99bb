#!/usr/bin/env bash
# The one test command (README, `make test`, CI): installs what it needs, then lint, types, tests.
#
#   1. a virtualenv in .venv with the project and its test extras, and the tools the tests run
#      (Kubernetes binaries, Kueue, upstream's controller, the image, Prometheus), built once and
#      cached outside the repo: hack/test-env.sh; with arguments, only the tools the selected
#      tests need (hack/tools_needed.py), so `hack/test.sh tests/unit -m "not tools"` builds none;
#   2. ruff (lint + format check), mypy (strict), the import contracts (lint-imports, from
#      pyproject.toml);
#   3. the unit tier on every other python3.X found (hack/test-pythons.sh --part unit);
#   4. pytest (every tier), spread over $JOBSET_TEST_WORKERS processes (default 4; pytest-xdist,
#      with tests/conftest.py's scheduler: the tests that share a cluster stay on one worker, the
#      longest groups start first). On 2 cores the suite mostly waits on clusters, so 4 workers
#      keep both cores busy; JOBSET_TEST_WORKERS=0 runs it in one process.
#   5. the rest of the other Pythons' part: the unit tests that run a built tool and the TLS,
#      webhook and client integration tests (hack/test-pythons.sh --part after-tools).
# For the whole suite, the tools build in the background while 2 and 3 run (none of those needs
# them: tests marked `tools` wait for step 4); a cold build is CPU-bound for about 20 minutes, and
# those steps fill the time it leaves a core idle instead of adding their own.
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"` or `-k crd`.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/test-env.sh

test_venv
whole=$(( $# == 0 ))
if [ "$whole" = 1 ]; then
  test_tools_start
else
  # A selection builds only what its tests run (hack/tools_needed.py: pytest collects it and
  # its markers name the tools; the unit tier without the `tools` tests needs none).
  step "which tools the selection needs"
  mapfile -t needed < <("$venv/bin/python" hack/tools_needed.py "$@")
  if [ "${#needed[@]}" -gt 0 ]; then
    test_tools "${needed[@]}"
  else
    echo "none: nothing is built"
  fi
fi

step "ruff"
"$venv/bin/ruff" check src tests hack
"$venv/bin/ruff" format --check src tests hack

step "mypy"
"$venv/bin/mypy"

step "import contracts"
"$venv/bin/lint-imports" --no-cache

# A failed test part does not stop the parts after it: one run reports every failure, and exits
# with the first failure's code. Ctrl-C stops the run (pytest exits 2 on it, which would
# otherwise count as one more failed part).
trap 'exit 130' INT
status=0
part() { "$@" || { local code=$?; [ "$status" -ne 0 ] || status=$code; }; }
if [ "$whole" = 1 ]; then
  step "other pythons: unit tier"
  part hack/test-pythons.sh --part unit
  test_tools_wait
fi

step "pytest"
workers="${JOBSET_TEST_WORKERS:-4}"
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadscope)
fi
# The JUnit report: what each tier cost (hack/tier_times.py build/test-report.xml), and what a
# CI system shows per test.
mkdir -p build
part "$venv/bin/pytest" "${parallel[@]}" --junitxml=build/test-report.xml "$@"

# The other Pythons the project supports, for the whole suite only (a selection is a developer's
# quick look): their unit tests that run a built tool and the TLS integration tests.
if [ "$whole" = 1 ]; then
  step "other pythons: after the tools"
  part hack/test-pythons.sh --part after-tools
fi
exit $status
