"""Marks every test under tests/integration as `integration` (select or skip with -m)."""

from __future__ import annotations

from pathlib import Path

import pytest

_INTEGRATION = Path(__file__).parent / "integration"
_E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if _INTEGRATION in path.parents:
            item.add_marker(pytest.mark.integration)
        elif _E2E in path.parents:
            item.add_marker(pytest.mark.e2e)
