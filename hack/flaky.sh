#!/usr/bin/env bash
# The flake hunter: rerun tests under CPU load and print each one's failure rate.
#
#   hack/flaky.sh TESTS... [--runs N] [--load L] [-- PYTEST_ARGS]
#
# e.g. hack/flaky.sh tests/e2e/test_tools.py --runs 10 --load 8
# Every cluster-bound test goes through it before it lands (docs/testing.md). Each run is a new
# pytest process; L busy-looping processes run beside all of them. Exit 0 only if every run of
# every test passed. The tools come from the same caches as `make test` (hack/test-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/test-env.sh
test_venv >&2
test_tools >&2
exec "$venv/bin/python" hack/flaky.py "$@"
