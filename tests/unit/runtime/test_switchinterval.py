"""runtime/switchinterval.py: the short interval while a busy block is open, the one found
before it after the last closes, overlapping blocks counted."""

from __future__ import annotations

import sys

import pytest

from jobset_controller.runtime.switchinterval import BUSY_INTERVAL, SwitchInterval


class Interval:
    """A stand-in for the interpreter's setting, so no test changes the real one."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.sets: list[float] = []

    def get(self) -> float:
        return self.value

    def set(self, value: float) -> None:
        self.value = value
        self.sets.append(value)


def switch(interval: Interval) -> SwitchInterval:
    return SwitchInterval(get=interval.get, set_=interval.set)


def test_the_interval_is_short_inside_a_busy_block_and_restored_after() -> None:
    interval = Interval(0.005)
    busy = switch(interval)
    with busy.busy():
        assert interval.value == BUSY_INTERVAL == 0.001
    assert interval.value == 0.005


def test_overlapping_blocks_restore_only_when_the_last_closes_and_set_once_each_way() -> None:
    interval = Interval(0.005)
    busy = switch(interval)
    first, second = busy.busy(), busy.busy()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first to open closes first: the other still runs
    assert (interval.value, busy.open) == (0.001, 1)
    second.__exit__(None, None, None)
    assert (interval.value, busy.open) == (0.005, 0)
    assert interval.sets == [0.001, 0.005]


def test_an_exception_in_a_block_still_restores_the_interval() -> None:
    interval = Interval(0.002)  # whatever was set before: an operator's own choice is kept
    busy = switch(interval)
    with pytest.raises(RuntimeError), busy.busy():
        raise RuntimeError("reconcile failed")
    assert (interval.value, busy.open) == (0.002, 0)


def test_by_default_it_drives_the_interpreters_own_setting() -> None:
    before = sys.getswitchinterval()
    with SwitchInterval().busy():
        assert sys.getswitchinterval() == pytest.approx(BUSY_INTERVAL)
    assert sys.getswitchinterval() == before
