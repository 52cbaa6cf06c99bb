#!/usr/bin/env bash
# The longer random run of the property tests (hypothesis), beside the test command's
# deterministic one (tests/conftest.py: there every example derives from the test's name).
#
#   hack/explore.sh [--rounds N] [pytest args]     default 5 rounds, each a new random draw
#
# A failure prints the example and `@reproduce_failure(...)`: a bug, fixed at its cause, the
# example kept as an `@example(...)` on the test so the deterministic run covers it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
if [ "${1:-}" = "--rounds" ]; then
  rounds=$2
  shift 2
fi
venv="${JOBSET_VENV:-.venv}"
files=$(grep -rl --include='test_*.py' '@given' tests/unit | sort)
for round in $(seq 1 "$rounds"); do
  echo "==> round $round of $rounds"
  "$venv/bin/pytest" -q -p no:cacheprovider --hypothesis-profile=explore $files "$@"
done
