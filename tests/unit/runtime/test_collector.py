"""runtime/collector.py: the thresholds the run command sets."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from jobset_controller.runtime.collector import THRESHOLDS, set_thresholds


@pytest.fixture
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored")
def test_young_collections_are_rarer_and_the_older_generations_keep_cpythons_thresholds() -> None:
    gc.set_threshold(700, 10, 10)  # CPython's
    set_thresholds()
    assert gc.get_threshold() == THRESHOLDS == (10_000, 10, 10)
