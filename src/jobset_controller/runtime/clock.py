"""Monotonic time as an injected dependency.

Why: the work queue's delays, the rate limiters and the metrics all measure time. Taking the clock
as an argument lets tests step virtual time with `FakeClock` instead of sleeping, so a test of a
1000 s backoff runs in microseconds and never flakes on a slow machine.

A clock gives monotonic seconds (`now`) and a way to wait (`sleep`). It is not the wall clock:
values are only meaningful relative to each other on the same clock.
"""

import asyncio
import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds and an awaitable delay on the same time line."""

    def now(self) -> float:
        """Seconds on a monotonic time line; never decreases."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `now()` has passed the current time plus `seconds`."""
        ...


class RealClock:
    """The process's monotonic clock, with `asyncio.sleep` for waiting.

    `now` is `time.monotonic()`, the clock asyncio's default event loop schedules timers on, so a
    sleep of d seconds ends when `now` has advanced by about d. It works without a running loop,
    which lets callers build rate limiters before the loop starts.
    """

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


@dataclass(order=True)
class _Sleeper:
    """One pending `FakeClock.sleep`, ordered by deadline, then by call order."""

    deadline: float
    sequence: int
    future: asyncio.Future[None] = field(compare=False)


class FakeClock:
    """Virtual time for tests: it moves only when the test awaits `advance`.

    `advance(seconds)` first lets the tasks that are ready run at the current time, so a task
    created just before the call starts its sleep from now, not from the target. Then it walks
    through the pending sleepers in deadline order (ties in the order `sleep` was called). At
    each deadline it sets `now` to exactly that deadline, wakes the sleepers due then, and lets
    the event loop run for `settle_rounds` iterations, so the woken tasks (and the tasks they
    wake in turn) run at that virtual instant; sleeps they start are honoured if they end within
    the same advance. Finally `now` is set to the target and the loop is settled once more.
    Nothing depends on real time.

    A sleep of zero or less returns after one yield to the loop, like `asyncio.sleep(0)`.
    A cancelled sleeper is skipped.
    """

    def __init__(self, start: float = 0.0, *, settle_rounds: int = 50) -> None:
        self._now = start
        self._settle_rounds = settle_rounds
        self._sleepers: list[_Sleeper] = []
        self._sequence = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, _Sleeper(self._now + seconds, next(self._sequence), future))
        await future

    @property
    def pending_sleepers(self) -> int:
        """How many sleeps are waiting for virtual time to pass (cancelled ones excluded)."""
        return sum(1 for sleeper in self._sleepers if not sleeper.future.done())

    async def advance(self, seconds: float) -> None:
        """Move virtual time forward by `seconds`, waking every sleeper due on the way."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back (advance by {seconds})")
        await self.settle()  # tasks that are ready now start their sleeps at the current time
        target = self._now + seconds
        while self._sleepers and self._sleepers[0].deadline <= target:
            self._now = self._sleepers[0].deadline
            while self._sleepers and self._sleepers[0].deadline <= self._now:
                sleeper = heapq.heappop(self._sleepers)
                if not sleeper.future.done():
                    sleeper.future.set_result(None)
            await self.settle()
        self._now = target
        await self.settle()

    async def settle(self) -> None:
        """Let ready tasks run without moving time: `settle_rounds` yields to the event loop."""
        for _ in range(self._settle_rounds):
            await asyncio.sleep(0)
