"""Delayed and rate-limited adds: a heap of ready times driven by the injected (fake) clock."""

import asyncio
from collections.abc import AsyncIterator, Hashable

import pytest

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.ratelimit import ItemExponentialFailureRateLimiter
from jobset_controller.runtime.workqueue import WorkQueue


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[WorkQueue[str]]:
    work_queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    yield work_queue
    work_queue.shutdown()


async def take_all(queue: WorkQueue[str]) -> list[str]:
    keys = []
    while len(queue):
        key = await queue.get()
        queue.done(key)
        keys.append(key)
    return keys


async def test_add_after_adds_once_the_delay_has_passed(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_after("ns/a", 2.0)
    await clock.advance(1.5)
    assert len(queue) == 0
    await clock.advance(0.5)
    assert await take_all(queue) == ["ns/a"]


async def test_waiting_get_receives_a_delayed_key_when_it_is_ready(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    getter = asyncio.create_task(queue.get())
    queue.add_after("ns/a", 1.0)
    await clock.advance(0.75)
    assert not getter.done()
    await clock.advance(0.25)
    assert getter.result() == "ns/a"


@pytest.mark.parametrize("delay", [0.0, -3.0], ids=["zero", "negative"])
async def test_add_after_with_a_non_positive_delay_adds_now(
    queue: WorkQueue[str], delay: float
) -> None:
    queue.add_after("ns/a", delay)
    assert len(queue) == 1


async def test_delayed_keys_are_added_in_ready_time_order(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_after("ns/c", 3.0)
    queue.add_after("ns/a", 1.0)
    queue.add_after("ns/b", 2.0)
    await clock.advance(10.0)
    assert await take_all(queue) == ["ns/a", "ns/b", "ns/c"]


async def test_delayed_keys_with_the_same_ready_time_keep_call_order(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    for key in ["ns/b", "ns/c", "ns/a"]:
        queue.add_after(key, 1.0)
    await clock.advance(1.0)
    assert await take_all(queue) == ["ns/b", "ns/c", "ns/a"]


async def test_an_earlier_delayed_key_re_arms_the_timer(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_after("ns/late", 10.0)
    await clock.advance(1.0)
    queue.add_after("ns/early", 1.0)
    await clock.advance(1.0)
    assert await take_all(queue) == ["ns/early"]
    await clock.advance(8.0)
    assert await take_all(queue) == ["ns/late"]


@pytest.mark.parametrize(
    "delays",
    [(1.0, 10.0), (10.0, 1.0), (1.0, 1.0)],
    ids=["short-then-long", "long-then-short", "same-twice"],
)
async def test_earliest_ready_time_wins_when_a_key_is_scheduled_twice(
    queue: WorkQueue[str], clock: FakeClock, delays: tuple[float, float]
) -> None:
    for delay in delays:
        queue.add_after("ns/a", delay)
    await clock.advance(1.0)
    assert await take_all(queue) == ["ns/a"]
    await clock.advance(20.0)
    assert len(queue) == 0  # the later schedule was merged away, not kept


async def test_plain_add_while_waiting_runs_now_and_the_delayed_add_still_fires(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_after("ns/a", 5.0)
    queue.add("ns/a")
    assert await take_all(queue) == ["ns/a"]
    await clock.advance(5.0)
    assert await take_all(queue) == ["ns/a"]


async def test_delayed_add_merges_into_a_key_that_is_already_queued(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_after("ns/a", 1.0)
    await clock.advance(0.5)
    queue.add("ns/a")
    await clock.advance(0.5)
    assert await take_all(queue) == ["ns/a"]


async def test_delayed_add_of_a_key_in_flight_runs_it_once_more_after_done(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add("ns/a")
    key = await queue.get()
    queue.add_after("ns/a", 1.0)
    await clock.advance(1.0)
    assert len(queue) == 0
    queue.done(key)
    assert await take_all(queue) == ["ns/a"]


async def test_shutdown_discards_delayed_adds(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add_after("ns/a", 1.0)
    queue.shutdown()
    await clock.advance(2.0)
    assert len(queue) == 0
    assert clock.pending_sleepers == 0


# ---------------------------------------------------------------- rate-limited adds


async def test_add_rate_limited_waits_5ms_then_10ms_with_the_default_limiter(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add_rate_limited("ns/a")
    await clock.advance(0.004)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert await take_all(queue) == ["ns/a"]

    queue.add_rate_limited("ns/a")
    await clock.advance(0.009)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert await take_all(queue) == ["ns/a"]
    assert queue.num_requeues("ns/a") == 2


async def test_forget_resets_the_requeue_count(queue: WorkQueue[str]) -> None:
    for _ in range(3):
        queue.add_rate_limited("ns/a")
    assert queue.num_requeues("ns/a") == 3
    queue.forget("ns/a")
    assert queue.num_requeues("ns/a") == 0


async def test_add_rate_limited_uses_the_injected_limiter(clock: FakeClock) -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=4.0)
    queue: WorkQueue[Hashable] = WorkQueue("test", clock=clock, rate_limiter=limiter)
    ready_times = []
    for _ in range(4):
        queue.add_rate_limited("ns/a")
        started = clock.now()
        while not len(queue):
            await clock.advance(0.5)
        ready_times.append(clock.now() - started)
        queue.done(await queue.get())
    assert ready_times == [1.0, 2.0, 4.0, 4.0]
    queue.shutdown()
