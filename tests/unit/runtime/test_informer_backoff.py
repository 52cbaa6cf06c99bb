"""The informer's timing on virtual time: each backoff wait is delay x (1 + draw), the delay
doubles from 0.8 s to 30 s and starts over after two healthy minutes, and a watch that closes
at once without events counts as a failure (no hot loop). The draws are fixed at 0.5 (conftest).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from jobset_controller.runtime.clock import FakeClock, RandomSource
from jobset_controller.runtime.informer import Informer
from jobset_controller.runtime.resources import Resource

CONFIGMAPS = Resource("", "v1", "configmaps")
UPDATE = {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "6"}}}


class TimedClient:
    """One empty list, then watches from a script; records when each watch starts.

    A script entry is an exception (the watch fails at once), a number of seconds (the watch
    delivers one event, stays open that long on the fake clock, then ends cleanly) or None
    (the watch ends at once without events). Past the script a watch stays open forever.
    """

    def __init__(self, clock: FakeClock, script: list[BaseException | float | None]) -> None:
        self.clock, self.script = clock, script
        self.watch_times: list[float] = []
        self.timeouts: list[int] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "5"}, "items": []}

    async def watch(
        self, path: str, *, params: dict[str, Any], read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        self.watch_times.append(self.clock.now())
        self.timeouts.append(params["timeoutSeconds"])
        if not self.script:
            await asyncio.Event().wait()
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if step is not None:
            yield UPDATE
            await self.clock.sleep(step)  # open `step` virtual seconds


@contextlib.asynccontextmanager
async def running(
    client: TimedClient, clock: FakeClock, draws: RandomSource
) -> AsyncIterator[Informer]:
    informer = Informer(client, CONFIGMAPS, clock=clock, rng=draws)  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    try:
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def failures(count: int) -> Iterator[BaseException]:
    return (ConnectionResetError("reset") for _ in range(count))


async def test_failures_back_off_doubling_to_30_seconds_with_jitter(
    clock: FakeClock, draws: RandomSource
) -> None:
    client = TimedClient(clock, [*failures(8)])
    async with running(client, clock, draws) as informer:
        await clock.advance(1.19)
        assert client.watch_times == [0.0]  # the first retry waits 0.8 x 1.5 = 1.2 s
        await clock.advance(0.02)
        assert client.watch_times == pytest.approx([0.0, 1.2])
        await clock.advance(500)
    delays = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    assert list(informer.stats.backoff_delays) == pytest.approx([d * 1.5 for d in delays])
    starts = [sum(d * 1.5 for d in delays[:n]) for n in range(len(delays) + 1)]
    assert client.watch_times == pytest.approx(starts)  # each retry exactly when its wait ends


async def test_the_backoff_starts_over_after_two_healthy_minutes(
    clock: FakeClock, draws: RandomSource
) -> None:
    client = TimedClient(clock, [*failures(3), 121.0, ConnectionResetError("reset")])
    async with running(client, clock, draws) as informer:
        await clock.advance(1000)
    assert list(informer.stats.backoff_delays) == pytest.approx([1.2, 2.4, 4.8, 1.2])


async def test_a_shorter_healthy_spell_keeps_the_grown_backoff(
    clock: FakeClock, draws: RandomSource
) -> None:
    client = TimedClient(clock, [*failures(3), 100.0, ConnectionResetError("reset")])
    async with running(client, clock, draws) as informer:
        await clock.advance(1000)
    assert list(informer.stats.backoff_delays) == pytest.approx([1.2, 2.4, 4.8, 9.6])


async def test_a_watch_closed_at_once_without_events_is_a_failure(
    clock: FakeClock, draws: RandomSource
) -> None:
    client = TimedClient(clock, [None, None])
    async with running(client, clock, draws) as informer:
        await clock.advance(1.19)
        assert client.watch_times == [0.0]
        await clock.advance(10)
    assert informer.stats.errors == 2
    assert list(informer.stats.backoff_delays) == pytest.approx([1.2, 2.4])


async def test_the_watch_timeout_is_drawn_between_the_minimum_and_twice_it(
    clock: FakeClock, draws: RandomSource
) -> None:
    client = TimedClient(clock, [])
    async with running(client, clock, draws):
        await clock.advance(1)
    assert client.timeouts == [600]  # the draw takes the upper end of [300, 600]
