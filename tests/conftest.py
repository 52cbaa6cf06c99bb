"""Marks every test under tests/integration as `integration`, under tests/e2e as `e2e` and under
tests/node as `node`
(select or skip with -m); makes property tests deterministic in CI.

Why deterministic in CI: a property test that finds a new counterexample on some run is a real
finding, but CI must judge the change it runs on, not the luck of the draw. With `CI` set (as the
CI runner does) hypothesis derives its examples from each test's name; locally it keeps exploring
new ones on every run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

_INTEGRATION = Path(__file__).parent / "integration"
_E2E = Path(__file__).parent / "e2e"
_NODE = Path(__file__).parent / "node"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if _INTEGRATION in path.parents:
            item.add_marker(pytest.mark.integration)
        elif _E2E in path.parents:
            item.add_marker(pytest.mark.e2e)
        elif _NODE in path.parents:
            item.add_marker(pytest.mark.node)
