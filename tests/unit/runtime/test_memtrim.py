"""Memory trim after the start's burst: once, only after the work queue has stayed idle."""

from __future__ import annotations

import asyncio
import threading

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.loopthread import LoopThread
from jobset_controller.runtime.memtrim import (
    TrimAfterCloses,
    malloc_trim,
    resident_bytes,
    trim_once_quiet,
)
from jobset_controller.runtime.workqueue import WorkQueue


async def test_trim_waits_for_the_queue_to_stay_idle_for_the_quiet_period() -> None:
    clock = FakeClock()
    busy = [True]
    calls: list[float] = []

    def trim() -> bool:
        calls.append(clock.now())
        return True

    task = asyncio.create_task(
        trim_once_quiet(lambda: not busy[0], clock, quiet_for=2.0, check_every=0.5, trim=trim)
    )
    await clock.advance(5.0)
    assert calls == []  # busy all along
    busy[0] = False
    await clock.advance(1.5)
    busy[0] = True  # work came back before the quiet period ended: start over
    await clock.advance(1.0)
    busy[0] = False
    await clock.advance(1.5)
    assert calls == []
    await clock.advance(1.0)
    assert calls == [10.0]  # idle first seen by the check at 8.0; trimmed at 8.0 + 2.0
    assert await task is True


def record(calls: list[float], now: float) -> bool:
    calls.append(now)
    return False


async def test_trim_runs_once() -> None:
    clock = FakeClock()
    calls: list[float] = []
    task = asyncio.create_task(
        trim_once_quiet(lambda: True, clock, trim=lambda: record(calls, clock.now()))
    )
    await clock.advance(60.0)
    assert task.done()
    assert task.result() is False
    assert len(calls) == 1


async def test_work_queue_is_idle_only_with_nothing_queued_or_in_flight() -> None:
    queue: WorkQueue[str] = WorkQueue("test", clock=FakeClock())
    assert queue.idle
    queue.add("a")
    assert not queue.idle
    key = await queue.get()
    assert not queue.idle  # in flight
    queue.done(key)
    assert queue.idle
    queue.add_after("b", 10.0)
    assert queue.idle  # a key waiting out a delay is not work yet
    queue.shutdown()


def test_malloc_trim_on_glibc_gives_back_freed_memory() -> None:
    """On this (glibc) machine: RSS after freeing 200 MiB of small objects and trimming is
    below RSS with them alive."""
    blocks = [bytearray(600) for _ in range(300_000)]
    keep = blocks[::97]  # a few survivors pin the heap's top, as cache entries do
    full = resident_bytes()
    del blocks
    assert malloc_trim() is True
    assert resident_bytes() < full - 100 * 2**20, (full, resident_bytes())
    assert keep


async def test_a_burst_of_closes_is_trimmed_once_it_settles_and_not_more_often_than_every() -> None:
    loop = asyncio.get_running_loop()
    trims: list[float] = []
    calls: list[str] = []
    trimmed = asyncio.Event()

    def trim() -> bool:
        trims.append(loop.time())
        calls.append("trim")
        trimmed.set()
        return True

    def collect() -> int:
        calls.append("collect")
        return 0

    closes = TrimAfterCloses(burst=3, settle=0.05, every=0.3, trim=trim, collect=collect)
    closes.closed()
    closes.closed()
    burst_at = loop.time()
    closes.closed()  # the third: a trim is due `settle` from now
    async with asyncio.timeout(5):
        await trimmed.wait()
    assert trims[0] - burst_at >= 0.05
    assert calls == ["collect", "trim"]  # the collector first (cycles: see the docstring)
    trimmed.clear()
    for _ in range(3):
        closes.closed()  # another burst at once: due no sooner than `every` after the first
    async with asyncio.timeout(5):
        await trimmed.wait()
    assert trims[1] - trims[0] >= 0.3
    assert calls == ["collect", "trim"] * 2


async def test_fewer_closes_than_a_burst_never_trim() -> None:
    trims: list[bool] = []

    def trim() -> bool:
        trims.append(True)
        return True

    closes = TrimAfterCloses(burst=3, settle=0.0, every=0.0, trim=trim)
    closes.closed()
    closes.closed()
    await asyncio.sleep(0)
    assert closes._handle is None  # nothing scheduled
    assert trims == []


async def test_closes_on_two_threads_loops_share_one_trim_and_its_bound() -> None:
    """The webhook server closes connections on its own thread's loop, the other servers on the
    main loop: a trim due on either stands for both, so two bursts at once trim once, and the
    next no sooner than `every` after it, whichever loop schedules it."""
    main = asyncio.get_running_loop()
    trims: list[tuple[float, str]] = []
    trimmed = threading.Event()

    def trim() -> bool:
        trims.append((main.time(), threading.current_thread().name))
        trimmed.set()
        return True

    closes = TrimAfterCloses(burst=2, settle=1.0, every=0.5, trim=trim, collect=lambda: 0)
    thread = LoopThread("test-trim")
    thread.start()

    async def burst() -> None:
        closes.closed()
        closes.closed()

    try:
        await thread.call(burst)  # due on the thread's loop
        await burst()  # on the main loop too: the one due stands for it
        assert await asyncio.to_thread(trimmed.wait, 30)
        trimmed.clear()
        await burst()  # the next burst, from the main loop: not before `every`
        assert await asyncio.to_thread(trimmed.wait, 30)
    finally:
        await thread.stop()
    assert [name for _, name in trims] == ["test-trim", "MainThread"]
    assert trims[1][0] - trims[0][0] >= 0.5
