"""Marks every test under tests/integration as `integration`, under tests/e2e as `e2e` and under
tests/node as `node` (select or skip with -m); groups the tests that share a cluster for the
parallel run; makes property tests deterministic in CI.

Why deterministic in CI: a property test that finds a new counterexample on some run is a real
finding, but CI must judge the change it runs on, not the luck of the draw. With `CI` set (as the
CI runner does) hypothesis derives its examples from each test's name; locally it keeps exploring
new ones on every run.

Why groups: `make test` spreads the suite over pytest-xdist workers (`--dist loadgroup`), each a
process of its own. A session fixture (a control plane, a full cluster) is then started by each
worker that needs it, which is cheap; a fixture shared by a module or a directory must instead
see all of its tests on one worker, or it would be started once per worker (and a real node's
check of the host's state would see another node's). So every test that uses a module-scoped
fixture is grouped with its module, and the directories in `SHARED_DIRECTORIES` form one group
each. Groups run longest-first (`RUN_FIRST`), so the long ones do not start last.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

_TESTS = Path(__file__).parent
_INTEGRATION = _TESTS / "integration"
_E2E = _TESTS / "e2e"
_NODE = _TESTS / "node"

# Directories whose tests share one instance of a costly fixture (scope package or session,
# defined in the directory's conftest) and so run as one group, with why.
SHARED_DIRECTORIES: Final = {
    "node": "one real node (kubelet, containerd, CoreDNS) for the tier; it checks the host's "
    "iptables, links and mounts are as it found them",
    "differential": "two full clusters and both controllers, every scenario started at once",
    "e2e/kueue": "one full cluster with our controller shared by the Kueue modules",
}
# Where a group or test starts in the run, first to last: the longest (measured) first, the
# unit tests last, where their many small pieces fill the workers' ends.
RUN_FIRST: Final = ("node", "differential", "e2e/kueue", "swap", "e2e", "integration", "unit")


def _tier(path: Path) -> str:
    relative = path.relative_to(_TESTS).as_posix()
    return next((tier for tier in RUN_FIRST if relative.startswith(tier + "/")), "")


def _group(item: pytest.Item, path: Path) -> str | None:
    relative = path.relative_to(_TESTS).as_posix()
    for directory in SHARED_DIRECTORIES:
        if relative.startswith(directory + "/"):
            return directory
    info = getattr(item, "_fixtureinfo", None)
    for definitions in getattr(info, "name2fixturedefs", {}).values():
        if definitions and definitions[-1].scope in ("module", "package", "class"):
            return relative
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if _INTEGRATION in path.parents:
            item.add_marker(pytest.mark.integration)
        elif _E2E in path.parents:
            item.add_marker(pytest.mark.e2e)
        elif _NODE in path.parents:
            item.add_marker(pytest.mark.node)
        group = _group(item, path) if _TESTS in path.parents else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    rank = {tier: number for number, tier in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(_tier(Path(str(item.path))), len(rank)))
