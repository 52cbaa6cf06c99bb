"""Fixtures shared by the runtime tests: virtual time, fixed random draws, a private registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from jobset_controller.runtime.clock import FakeClock, RandomSource

DRAW = 0.5  # what `draws.random()` returns


class FixedDraws:
    """A RandomSource whose draws are known: `random()` is DRAW, `randint(a, b)` is `b`."""

    def random(self) -> float:
        return DRAW

    def randint(self, a: int, b: int) -> int:
        return b


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def draws() -> RandomSource:
    return FixedDraws()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()
