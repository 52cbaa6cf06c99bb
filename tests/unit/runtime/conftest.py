"""Fixtures shared by the runtime tests: virtual time and a private metrics registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from jobset_controller.runtime.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()
