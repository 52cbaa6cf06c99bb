"""Monotonic time and randomness as injected dependencies.

Why: the work queue's delays, the rate limiters, the informer's backoff, leader election's retry
and renew deadlines, the client's Retry-After waits and the metrics all measure time, and the
backoffs draw jitter. Every runtime piece takes the clock (and, where it jitters, the random
source) as an argument, with the real one as default, so tests step virtual time with
`FakeClock` and fix the draws instead of sleeping: a test of a 1000 s backoff runs in
microseconds and never flakes on a slow machine.

A clock gives monotonic seconds (`now`) and a way to wait (`sleep`). It is not the wall clock:
values are only meaningful relative to each other on the same clock. `wait_for` bounds an
awaitable by time measured on a clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    """Monotonic seconds and an awaitable delay on the same time line."""

    def now(self) -> float:
        """Seconds on a monotonic time line; never decreases."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `now()` has passed the current time plus `seconds`."""
        ...


class RandomSource(Protocol):
    """The draws the runtime's jitter uses. The `random` module itself is one (the default
    everywhere); tests pass a seeded `random.Random` or a stub returning fixed values."""

    def random(self) -> float:
        """A float in [0, 1)."""
        ...

    def randint(self, a: int, b: int) -> int:
        """An integer in [a, b], both ends included."""
        ...


async def wait_for(clock: Clock, awaitable: Awaitable[T], seconds: float) -> T:
    """`asyncio.wait_for` with the deadline measured on `clock`.

    The awaitable runs as a task raced against `clock.sleep(seconds)`. If the deadline comes
    first, the task is cancelled (and awaited) and TimeoutError is raised; if both finish at the
    same instant, the result wins. Cancelling the caller cancels both.
    """
    task = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        done, _ = await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        await _cancel(task, timer)
        raise
    await _cancel(timer)
    if task in done:
        return task.result()
    await _cancel(task)
    raise TimeoutError


async def _cancel(*tasks: asyncio.Future[Any]) -> None:
    """Cancel `tasks` and wait until they have ended, without raising what they raise."""
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)


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
