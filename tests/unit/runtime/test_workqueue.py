"""The work queue's guarantees, one test each: stingy, one worker per key, re-add after done, fair,
shutdown with and without drain, and delayed and rate-limited adds (a heap of ready times driven
by the injected clock). Virtual time only (FakeClock)."""

import asyncio
from collections.abc import AsyncIterator, Hashable

import pytest

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.ratelimit import ItemExponentialFailureRateLimiter
from jobset_controller.runtime.workqueue import QueueShutDown, WorkQueue


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[WorkQueue[str]]:
    work_queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    yield work_queue
    work_queue.shutdown()


async def take_all(queue: WorkQueue[str]) -> list[str]:
    """Get every queued key (marking each done), in the order handed out."""
    keys = []
    while len(queue):
        key = await queue.get()
        queue.done(key)
        keys.append(key)
    return keys


# ---------------------------------------------------------------- 1. stingy


@pytest.mark.parametrize("adds", [2, 100], ids=["twice", "a-hundred-times"])
async def test_adds_before_processing_collapse_into_one(queue: WorkQueue[str], adds: int) -> None:
    for _ in range(adds):
        queue.add("ns/a")
    assert len(queue) == 1
    assert await take_all(queue) == ["ns/a"]


# ---------------------------------------------------------------- 2. one worker per key


async def test_key_is_never_held_by_two_workers_at_once(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await clock.settle()
    queue.add("ns/a")
    await clock.settle()
    assert first.done()
    assert first.result() == "ns/a"

    queue.add("ns/a")  # an event for the key while the first worker holds it
    await clock.settle()
    assert not second.done()

    queue.done("ns/a")
    await clock.settle()
    assert second.done()
    assert second.result() == "ns/a"


async def test_add_while_processing_requeues_after_done(queue: WorkQueue[str]) -> None:
    queue.add("ns/a")
    key = await queue.get()
    queue.add("ns/a")
    assert len(queue) == 0  # dirty, but not handed out while in flight
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "ns/a"


async def test_adds_while_processing_collapse_into_one_more_run(queue: WorkQueue[str]) -> None:
    queue.add("ns/a")
    key = await queue.get()
    for _ in range(5):
        queue.add("ns/a")
    queue.done(key)
    assert await take_all(queue) == ["ns/a"]


async def test_done_without_get_is_rejected(queue: WorkQueue[str]) -> None:
    queue.add("ns/a")
    with pytest.raises(ValueError, match="without a matching get"):
        queue.done("ns/a")
    key = await queue.get()
    queue.done(key)
    with pytest.raises(ValueError, match="without a matching get"):
        queue.done(key)


# ---------------------------------------------------------------- 3. fair


async def test_distinct_keys_are_handed_out_first_in_first_out(queue: WorkQueue[str]) -> None:
    for key in ["ns/c", "ns/a", "ns/b", "ns/a", "ns/c"]:
        queue.add(key)
    assert await take_all(queue) == ["ns/c", "ns/a", "ns/b"]


async def test_key_requeued_after_done_goes_to_the_back(queue: WorkQueue[str]) -> None:
    queue.add("ns/a")
    key = await queue.get()
    queue.add("ns/a")
    queue.add("ns/b")
    queue.done(key)  # ns/a is queued again now, behind ns/b
    assert await take_all(queue) == ["ns/b", "ns/a"]


async def test_blocked_getters_are_served_in_arrival_order(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    getters = []
    for _ in range(3):
        getters.append(asyncio.create_task(queue.get()))
        await clock.settle()
    for key in ["ns/a", "ns/b", "ns/c"]:
        queue.add(key)
    await clock.settle()
    assert [getter.result() for getter in getters] == ["ns/a", "ns/b", "ns/c"]


# ---------------------------------------------------------------- get and len


async def test_get_blocks_until_a_key_is_added(queue: WorkQueue[str], clock: FakeClock) -> None:
    getter = asyncio.create_task(queue.get())
    await clock.settle()
    assert not getter.done()
    queue.add("ns/a")
    await clock.settle()
    assert getter.result() == "ns/a"


async def test_cancelled_getter_passes_its_wake_up_on(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    first = asyncio.create_task(queue.get())
    await clock.settle()
    second = asyncio.create_task(queue.get())
    await clock.settle()
    queue.add("ns/a")  # wakes the first getter...
    first.cancel()  # ...which is cancelled before it runs
    await clock.settle()
    assert first.cancelled()
    assert second.result() == "ns/a"


async def test_len_counts_queued_keys_not_keys_in_flight(queue: WorkQueue[str]) -> None:
    queue.add("ns/a")
    queue.add("ns/b")
    assert len(queue) == 2
    await queue.get()
    assert len(queue) == 1


# ---------------------------------------------------------------- shutdown


async def test_adds_after_shutdown_are_dropped(queue: WorkQueue[str]) -> None:
    queue.shutdown()
    queue.add("ns/a")
    queue.add_after("ns/b", 0)
    queue.add_rate_limited("ns/c")
    assert len(queue) == 0
    assert queue.shutting_down
    with pytest.raises(QueueShutDown):
        await queue.get()


async def test_get_hands_out_keys_queued_before_shutdown_then_raises(
    queue: WorkQueue[str],
) -> None:
    queue.add("ns/a")
    queue.add("ns/b")
    queue.shutdown()
    assert await take_all(queue) == ["ns/a", "ns/b"]
    with pytest.raises(QueueShutDown):
        await queue.get()


async def test_shutdown_wakes_every_blocked_getter_with_queue_shut_down(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await clock.settle()
    queue.shutdown()
    await clock.settle()
    for getter in getters:
        assert isinstance(getter.exception(), QueueShutDown)


async def test_key_re_added_before_shutdown_is_handed_out_after_done(
    queue: WorkQueue[str],
) -> None:
    queue.add("ns/a")
    key = await queue.get()
    queue.add("ns/a")
    queue.shutdown()
    queue.done(key)
    assert await take_all(queue) == ["ns/a"]


async def test_shut_down_with_drain_waits_for_work_in_flight(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add("ns/a")
    queue.add("ns/b")
    held = [await queue.get(), await queue.get()]
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await clock.settle()
    queue.add("ns/c")
    assert len(queue) == 0  # no new work is accepted while draining
    queue.done(held[0])
    await clock.settle()
    assert not drain.done()
    queue.done(held[1])
    await clock.settle()
    assert drain.result() is True


async def test_shut_down_with_drain_returns_at_once_when_nothing_is_in_flight(
    queue: WorkQueue[str],
) -> None:
    assert await queue.shut_down_with_drain(timeout=1.0) is True
    assert queue.shutting_down


async def test_drain_gives_up_after_its_timeout_on_the_queue_clock(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add("ns/a")
    await queue.get()
    drain = asyncio.create_task(queue.shut_down_with_drain(timeout=5.0))
    await clock.settle()
    await clock.advance(4.5)
    assert not drain.done()
    await clock.advance(0.5)
    assert drain.result() is False


async def test_drain_ends_when_in_flight_work_finishes_before_the_timeout(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    queue.add("ns/a")
    key = await queue.get()
    drain = asyncio.create_task(queue.shut_down_with_drain(timeout=5.0))
    await clock.advance(1.0)
    queue.done(key)
    await clock.settle()
    assert drain.result() is True
    await clock.advance(0.5)  # the in-flight gauges' updater notices nothing is in flight
    assert clock.pending_sleepers == 0  # and the drain timeout's sleep was cancelled


async def test_shutdown_abandons_a_waiting_drain(queue: WorkQueue[str], clock: FakeClock) -> None:
    queue.add("ns/a")
    await queue.get()
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await clock.settle()
    queue.shutdown()
    await clock.settle()
    assert drain.result() is False


async def test_drain_waits_for_workers_still_taking_queued_keys(
    queue: WorkQueue[str], clock: FakeClock
) -> None:
    for key in ["ns/a", "ns/b"]:
        queue.add(key)
    processed: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            await clock.sleep(1.0)  # a reconcile taking 1 s of virtual time
            processed.append(key)
            queue.done(key)

    worker_task = asyncio.create_task(worker())
    await clock.settle()
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await clock.advance(1.0)
    assert not drain.done()  # ns/b was taken as soon as ns/a was done
    await clock.advance(1.0)
    assert drain.result() is True
    assert processed == ["ns/a", "ns/b"]
    assert worker_task.done()


# --- delayed and rate-limited adds -----------------------------------------------------------


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


# --- fairness to the event loop ------------------------------------------------------------


async def test_get_yields_to_the_loop_even_with_keys_queued(queue: WorkQueue[str]) -> None:
    """A worker whose reconciles never block still lets other tasks run between keys."""
    for index in range(3):
        queue.add(f"ns/{index}")
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)  # one loop turn per tick: counts the turns others get

    other_task = asyncio.create_task(other())
    await asyncio.sleep(0)  # one loop turn: `other` starts ticking
    before = ticks
    for _ in range(3):
        key = await queue.get()  # never blocks: the keys are queued
        queue.done(key)
    assert ticks - before >= 3
    other_task.cancel()


async def test_get_cancelled_during_its_turn_puts_the_key_back_first(
    queue: WorkQueue[str],
) -> None:
    queue.add("ns/a")
    queue.add("ns/b")
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # the getter holds ns/a and is taking its turn
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    assert await take_all(queue) == ["ns/a", "ns/b"]
