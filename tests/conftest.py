"""Marks every test under tests/unit as `unit`, under tests/integration as `integration`, under
tests/e2e as `e2e` and under tests/node as `node` (select or skip with -m); decides how the
parallel run spreads the suite; makes property tests deterministic.

Why deterministic: a property test that finds a new counterexample on some run is a real
finding, but the test command (and CI, which runs it) must judge the change it runs on, not the
luck of the draw. So hypothesis derives its examples from each test's name (profile
`deterministic`); `hack/explore.sh` is the longer random run (profile `explore`: a new draw each
round), and what it finds is fixed and kept as an `@example`.

Why groups: `make test` spreads the suite over pytest-xdist workers, each a process of its own.
Tests that share a cluster must run on one worker, or each worker would start that cluster again
(and a real node's check of the host's state would see another node's). `group_of` names each
test's group from its path alone: a directory in `SHARED_DIRECTORIES` is one group, the e2e modules
in `E2E_PACKAGE_CLUSTER` are one group (they share the package's full cluster and controller), any
other module of a cluster tier is its own group (its module-scoped cluster, or the package's
control plane, started once per worker that runs it), and each unit test, and each test of a module
in `EACH_TEST_ALONE`, is a group of its own. `pytest_xdist_make_scheduler` hands xdist a scheduler
that sends whole groups, in the order of `RUN_FIRST` (the longest first, the unit tests last, where
their many small pieces fill the workers' ends). Why our own and not xdist's `--dist loadgroup`:
that one reads `xdist_group` marks by renaming `item._nodeid`, which pytest 9 no longer reads (a
node's id is `item._id`), so with pytest 9.2 and xdist 3.8 every test was scheduled alone.

Why no cluster is session-scoped: a worker lives for the whole run, and a session fixture with
it. Clusters kept after their last test cost CPU (every idle kube-apiserver, controller-manager
and scheduler polls) and inotify instances, of which a user has 128 on a default Linux (a
kube-apiserver takes 3, a controller-manager or scheduler 2, a kubelet about 20: measured). With
session-scoped clusters a parallel run held 13-15 API servers at once at a load of 18 and used up
the 128 (upstream's controller and Kueue then failed to start: "too many open files"). So clusters
are package-scoped (every cluster tier is a package, with an `__init__.py`, so that scope ends
with the tier's last test on a worker) or module-scoped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("deterministic")  # hack/explore.sh: --hypothesis-profile=explore

_TESTS = Path(__file__).parent
_UNIT = _TESTS / "unit"
_INTEGRATION = _TESTS / "integration"
_E2E = _TESTS / "e2e"
_NODE = _TESTS / "node"

# Directories whose tests share one costly fixture instance (package-scoped, in the directory's
# conftest), each one group, with why.
SHARED_DIRECTORIES: Final = {
    "node": "one real node (kubelet, containerd, CoreDNS) for the tier; it checks the host's "
    "iptables, links and mounts are as it found them",
    "differential": "two full clusters and both controllers, every scenario started at once",
    "e2e/kueue": "one full cluster with our controller shared by the Kueue modules",
    "image": "one control plane for the tier, and both architectures' images and the emulator "
    "made once",
}
# The e2e modules that use the package's `full_cluster` and `jobset_controller` (tests/e2e/
# conftest.py) rather than a cluster of their own: one group, so one such cluster runs.
# tests/unit/tooling/test_test_groups.py keeps this list equal to the modules that do.
E2E_PACKAGE_CLUSTER: Final = frozenset(
    {
        "e2e/test_examples_and_devloop.py",
        "e2e/test_full_cluster.py",
        "e2e/test_jobset_e2e.py",
        "e2e/test_observability.py",
        "e2e/test_tools.py",
    }
)
# The cluster-tier modules whose every test is a group of its own: they share no fixture (each test
# starts its own processes and clusters), so their tests spread over the workers.
EACH_TEST_ALONE: Final = {
    "e2e/test_bench_smoke.py": "each test runs one bench as a process of its own, with the "
    "bench's own clusters; run in one group they would add their times up on one worker",
}
# Where a group starts in the run, first to last: the longest (measured) first, the unit tests
# last, where their many small pieces fill the workers' ends.
RUN_FIRST: Final = (
    "node",
    "differential",
    "e2e/kueue",
    "swap",
    "image",
    "e2e",
    "integration",
    "unit",
)


def _relative(path: str) -> str:
    """A test file's path below tests/, from a node id's path or a file path."""
    text = Path(path).as_posix()
    for prefix in (_TESTS.as_posix() + "/", "tests/"):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


def _tier(relative: str) -> str:
    return next((tier for tier in RUN_FIRST if relative.startswith(tier + "/")), "")


def group_of(nodeid: str) -> str:
    """The group a test runs in (module docstring): its shared directory, the e2e package
    cluster's group, its module (cluster tiers), or itself (unit tests, `EACH_TEST_ALONE`
    and the rest)."""
    relative = _relative(nodeid.split("::", 1)[0])
    for directory in SHARED_DIRECTORIES:
        if relative.startswith(directory + "/"):
            return directory
    if relative in E2E_PACKAGE_CLUSTER:
        return "e2e"
    if _tier(relative) in ("", "unit") or relative in EACH_TEST_ALONE:
        return nodeid
    return relative


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if _INTEGRATION in path.parents:
            item.add_marker(pytest.mark.integration)
        elif _E2E in path.parents:
            item.add_marker(pytest.mark.e2e)
        elif _NODE in path.parents:
            item.add_marker(pytest.mark.node)
        elif _UNIT in path.parents:
            item.add_marker(pytest.mark.unit)
    rank = {tier: number for number, tier in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(_tier(_relative(str(item.path))), len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole groups (`group_of`) to a worker, in collection order (`RUN_FIRST`)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep RUN_FIRST's order, not largest-first
    return GroupScheduling(config, log)
