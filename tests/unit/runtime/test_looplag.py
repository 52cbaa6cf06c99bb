"""LoopLagMonitor: arithmetic and metrics on a scripted clock, plus one real measurement."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from jobset_controller.runtime.looplag import LoopLagMonitor


class LateClock:
    """A clock whose sleeps end late by scripted amounts, then never end."""

    def __init__(self, lags: list[float]) -> None:
        self._now = 100.0
        self._lags = list(lags)

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if not self._lags:
            await asyncio.Event().wait()
        await asyncio.sleep(0)  # a loop turn, as a timer's wake-up gives; no real time
        self._now += seconds + self._lags.pop(0)


async def run_until(monitor: LoopLagMonitor, samples: int) -> None:
    task = asyncio.create_task(monitor.run())
    try:
        for _ in range(1000):
            if monitor.samples >= samples:
                break
            await asyncio.sleep(0)  # a loop turn per check; LateClock time is virtual
        assert monitor.samples == samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_lag_is_how_much_later_than_planned_the_wakeup_ran() -> None:
    registry = CollectorRegistry()
    monitor = LoopLagMonitor(clock=LateClock([0.0, 0.3, 0.05]), registry=registry)

    await run_until(monitor, 3)

    assert monitor.last_lag == pytest.approx(0.05)
    assert monitor.max_lag == pytest.approx(0.3)
    assert registry.get_sample_value("jobset_event_loop_lag_seconds") == pytest.approx(0.05)
    count = registry.get_sample_value("jobset_event_loop_lag_distribution_seconds_count")
    total = registry.get_sample_value("jobset_event_loop_lag_distribution_seconds_sum")
    assert count == 3
    assert total == pytest.approx(0.35)


async def test_reset_max_returns_the_worst_lag_and_starts_over() -> None:
    monitor = LoopLagMonitor(clock=LateClock([0.4]))
    await run_until(monitor, 1)

    assert monitor.reset_max() == pytest.approx(0.4)
    assert monitor.max_lag == 0.0


async def test_a_lag_above_the_threshold_is_logged_as_a_warning() -> None:
    monitor = LoopLagMonitor(clock=LateClock([0.5, 2.0]), warn_threshold=1.0)

    with capture_logs() as logs:
        await run_until(monitor, 2)

    assert [entry["lag_seconds"] for entry in logs if entry["log_level"] == "warning"] == [2.0]


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval"):
        LoopLagMonitor(interval=0)


async def test_blocking_the_loop_shows_up_as_lag() -> None:
    """A real measurement: block the real loop once with time.sleep and see it measured."""
    monitor = LoopLagMonitor(interval=0.01)
    task = asyncio.create_task(monitor.run())
    try:
        await asyncio.sleep(0)  # the monitor starts its first sleep
        time.sleep(0.2)  # noqa: ASYNC251 - the stall under test, as a big parse or GC would be
        for _ in range(20):  # the overdue wake-up runs within a few loop iterations
            if monitor.samples:
                break
            await asyncio.sleep(0)  # a loop turn per check
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert monitor.samples >= 1
    assert monitor.max_lag >= 0.15


class RecordingClock(LateClock):
    """On time, and remembers every sleep it was asked for."""

    def __init__(self, count: int) -> None:
        super().__init__([0.0] * count)
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


async def test_idle_process_backs_off_to_the_idle_interval() -> None:
    clock = RecordingClock(5)
    monitor = LoopLagMonitor(clock=clock, idle_interval=1.0, cpu_time=lambda: 0.0)

    await run_until(monitor, 5)

    assert clock.sleeps[:5] == [0.25, 0.5, 1.0, 1.0, 1.0]


async def test_busy_process_keeps_the_short_interval() -> None:
    clock = RecordingClock(4)
    spent = iter(range(0, 1000))  # one CPU second per reading: always busy

    monitor = LoopLagMonitor(clock=clock, cpu_time=lambda: float(next(spent)))

    await run_until(monitor, 4)

    assert clock.sleeps[:4] == [0.25, 0.25, 0.25, 0.25]
