"""FakeClock moves only when told, wakes sleepers in deadline order, and never sleeps real time;
wait_for bounds work by time on a clock."""

import asyncio
import time

import pytest

from jobset_controller.runtime.clock import Clock, FakeClock, RealClock, wait_for


async def record_wake(
    clock: Clock, seconds: float, label: str, woken: list[tuple[str, float]]
) -> None:
    await clock.sleep(seconds)  # the sleep under test
    woken.append((label, clock.now()))


async def test_fake_clock_starts_where_told_and_stands_still() -> None:
    clock = FakeClock(start=100.0)
    await clock.settle()
    assert clock.now() == 100.0


async def test_sleep_wakes_only_once_virtual_time_passes_its_deadline() -> None:
    clock = FakeClock()
    woken: list[tuple[str, float]] = []
    task = asyncio.create_task(record_wake(clock, 5.0, "a", woken))
    await clock.settle()  # let the task start sleeping at t=0
    await clock.advance(4.75)
    assert woken == []
    assert clock.pending_sleepers == 1
    await clock.advance(0.25)
    assert woken == [("a", 5.0)]
    assert task.done()


async def test_task_created_just_before_advance_sleeps_from_the_current_time() -> None:
    clock = FakeClock()
    woken: list[tuple[str, float]] = []
    task = asyncio.create_task(record_wake(clock, 1.0, "a", woken))
    await clock.advance(1.0)
    assert woken == [("a", 1.0)]
    assert task.done()


async def test_sleepers_wake_in_deadline_order_at_their_own_deadline() -> None:
    clock = FakeClock()
    woken: list[tuple[str, float]] = []
    tasks = [
        asyncio.create_task(record_wake(clock, seconds, label, woken))
        for label, seconds in [("c", 3.0), ("a", 1.0), ("b", 2.0)]
    ]
    await clock.settle()
    await clock.advance(10.0)
    assert woken == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.now() == 10.0
    assert all(task.done() for task in tasks)


async def test_sleepers_with_the_same_deadline_wake_in_call_order() -> None:
    clock = FakeClock()
    woken: list[tuple[str, float]] = []
    tasks = []
    for label in ["first", "second", "third"]:
        tasks.append(asyncio.create_task(record_wake(clock, 1.0, label, woken)))
        await clock.settle()
    await clock.advance(1.0)
    assert [label for label, _ in woken] == ["first", "second", "third"]


async def test_sleep_started_by_a_woken_task_within_the_same_advance_is_honoured() -> None:
    clock = FakeClock()
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(3):
            await clock.sleep(1.0)  # the sleep under test
            ticks.append(clock.now())

    task = asyncio.create_task(ticker())
    await clock.settle()
    await clock.advance(2.5)
    assert ticks == [1.0, 2.0]
    await clock.advance(0.5)
    assert ticks == [1.0, 2.0, 3.0]
    assert task.done()


async def test_cancelled_sleeper_is_skipped() -> None:
    clock = FakeClock()
    woken: list[tuple[str, float]] = []
    cancelled = asyncio.create_task(record_wake(clock, 1.0, "cancelled", woken))
    kept = asyncio.create_task(record_wake(clock, 2.0, "kept", woken))
    await clock.settle()
    cancelled.cancel()
    await clock.settle()
    assert clock.pending_sleepers == 1
    await clock.advance(5.0)
    assert woken == [("kept", 2.0)]
    assert cancelled.cancelled()
    assert kept.done()


@pytest.mark.parametrize("seconds", [0.0, -1.0], ids=["zero", "negative"])
async def test_non_positive_sleep_returns_without_time_passing(seconds: float) -> None:
    clock = FakeClock()
    await asyncio.wait_for(clock.sleep(seconds), timeout=1.0)  # the sleep under test
    assert clock.now() == 0.0
    assert clock.pending_sleepers == 0


async def test_advancing_backwards_is_rejected() -> None:
    clock = FakeClock(start=10.0)
    with pytest.raises(ValueError, match="cannot go back"):
        await clock.advance(-1.0)
    assert clock.now() == 10.0


async def test_real_clock_is_the_monotonic_clock_of_the_event_loop() -> None:
    clock = RealClock()
    before = time.monotonic()
    now = clock.now()
    assert before <= now <= time.monotonic()
    assert abs(now - asyncio.get_running_loop().time()) < 1.0
    await clock.sleep(0)  # the sleep under test


def test_real_clock_works_without_a_running_loop() -> None:
    clock = RealClock()
    assert clock.now() <= clock.now()


# ------------------------------------------------------------------------------ wait_for
async def test_wait_for_times_out_on_the_clock_and_cancels_the_work(clock: FakeClock) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    waiting = asyncio.create_task(wait_for(clock, forever(), 5.0))
    await clock.advance(4.99)
    assert started.is_set()
    assert not waiting.done()
    await clock.advance(0.01)
    with pytest.raises(TimeoutError):
        await waiting
    assert cancelled.is_set()


async def test_wait_for_returns_the_result_and_stops_the_timer(clock: FakeClock) -> None:
    async def soon() -> str:
        await clock.sleep(1.0)  # virtual: the advance below ends it
        return "done"

    waiting = asyncio.create_task(wait_for(clock, soon(), 5.0))
    await clock.advance(1.0)
    assert waiting.result() == "done"
    assert clock.pending_sleepers == 0


async def test_wait_for_passes_the_work_s_error_through(clock: FakeClock) -> None:
    async def broken() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await wait_for(clock, broken(), 5.0)
