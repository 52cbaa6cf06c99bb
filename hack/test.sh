#!/usr/bin/env bash
# The one test command (README, `make test`, CI): installs what it needs, then lint, types, tests.
#
#   1. a virtualenv in .venv with the project and its test extras, and the tools the tests run
#      (Kubernetes binaries, Kueue, upstream's controller, the image, Prometheus), built once and
#      cached outside the repo: hack/test-env.sh;
#   2. ruff (lint + format check), mypy (strict), the import contracts (lint-imports, from
#      pyproject.toml);
#   3. pytest (every tier), spread over $JOBSET_TEST_WORKERS processes (default 4; pytest-xdist,
#      with tests/conftest.py's scheduler: the tests that share a cluster stay on one worker, the
#      longest groups start first). On 2 cores the suite mostly waits on clusters, so 4 workers
#      keep both cores busy; JOBSET_TEST_WORKERS=0 runs it in one process.
#   4. the unit tier and the TLS, webhook and client integration tests again on every other
#      python3.X found (hack/test-pythons.sh), when the whole suite was asked for.
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"` or `-k crd`.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/test-env.sh

test_venv
test_tools

step "ruff"
"$venv/bin/ruff" check src tests hack
"$venv/bin/ruff" format --check src tests hack

step "mypy"
"$venv/bin/mypy"

step "import contracts"
"$venv/bin/lint-imports" --no-cache

step "pytest"
workers="${JOBSET_TEST_WORKERS:-4}"
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadscope)
fi
# The JUnit report: what each tier cost (hack/tier_times.py build/test-report.xml), and what a
# CI system shows per test.
mkdir -p build
"$venv/bin/pytest" "${parallel[@]}" --junitxml=build/test-report.xml "$@"

# The other Pythons the project supports, for the whole suite only (a selection is a developer's
# quick look): the unit tier and the TLS integration tests on each python3.X found.
if [ "$#" -eq 0 ]; then
  step "other pythons"
  hack/test-pythons.sh
fi
