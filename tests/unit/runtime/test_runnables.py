"""The runnable groups' guarantees (runtime/runnables.py), on virtual time:

- groups start in the fixed order, each `start` in the order added, before the next group;
- a group's `synced` waits hold the next group back, bounded by the start's limit;
- every readiness check joins readiness when its runnable is added; readiness is their conjunction;
- a group's graceful stops are bounded by its budget, and its tasks are cancelled after them,
  even when the stop itself is cancelled;
- `stop_all` cancels the started groups newest first.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import pytest

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.runnables import Group, NotSynced, Runnable, Runnables


def noting(order: list[str], label: str) -> Callable[[], Awaitable[None]]:
    async def note() -> None:
        order.append(label)

    return note


def until_cancelled(order: list[str], label: str) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            order.append(label)

    return run


async def test_groups_start_in_order_whatever_order_they_were_added_in() -> None:
    order: list[str] = []
    runnables = Runnables(FakeClock())
    for group in reversed(Group):
        runnables.add(Runnable(group.name, group, start=noting(order, group.name)))
    for group in Group:
        await runnables.start(group)
    assert order == ["SERVERS", "WEBHOOKS", "CACHES", "OTHERS", "LEADER"]
    await runnables.stop_all()


async def test_runnables_of_a_group_start_in_the_order_added() -> None:
    order: list[str] = []
    runnables = Runnables(FakeClock())
    for name in ("probe", "workers", "trim"):
        runnables.add(Runnable(name, Group.LEADER, start=noting(order, name)))
    await runnables.start(Group.LEADER)
    assert order == ["probe", "workers", "trim"]


async def test_a_cache_group_start_waits_for_every_sync() -> None:
    listed = {"jobs": asyncio.Event(), "pods": asyncio.Event()}
    runnables = Runnables(FakeClock())
    for name, event in listed.items():
        runnables.add(Runnable(name, Group.CACHES, synced=event.wait))
    starting = asyncio.create_task(runnables.start(Group.CACHES, limit=120))
    listed["jobs"].set()
    await asyncio.sleep(0)  # a loop turn: the start sees the jobs listed
    assert not starting.done()  # the pods have not listed
    listed["pods"].set()
    await starting


async def test_a_cache_that_never_lists_fails_the_start_at_the_limit() -> None:
    clock = FakeClock()
    runnables = Runnables(clock)
    runnables.add(Runnable("pods", Group.CACHES, synced=asyncio.Event().wait))
    starting = asyncio.create_task(runnables.start(Group.CACHES, limit=120))
    await clock.advance(119.9)
    assert not starting.done()
    await clock.advance(0.1)
    with pytest.raises(NotSynced):
        await starting


async def test_every_readiness_check_joins_readiness_when_added() -> None:
    checks: dict[str, bool] = {"informer-jobsets": True, "informer-pods": False}
    registered: list[str] = []
    runnables = Runnables(FakeClock(), on_ready_check=lambda name, check: registered.append(name))
    for name in checks:
        runnables.add(
            Runnable(name, Group.CACHES, ready=functools.partial(checks.__getitem__, name))
        )
    runnables.add(Runnable("loop-lag", Group.OTHERS))  # no check: nothing registered
    assert registered == ["informer-jobsets", "informer-pods"]
    assert not runnables.ready()
    checks["informer-pods"] = True
    assert runnables.ready()


async def test_a_name_is_declared_once_and_a_started_group_takes_no_more() -> None:
    runnables = Runnables(FakeClock())
    runnables.add(Runnable("metrics", Group.SERVERS))
    with pytest.raises(ValueError, match="added twice"):
        runnables.add(Runnable("metrics", Group.SERVERS))
    await runnables.start(Group.SERVERS)
    with pytest.raises(ValueError, match="already started"):
        runnables.add(Runnable("health", Group.SERVERS))


async def test_a_graceful_stop_runs_before_the_task_is_cancelled() -> None:
    order: list[str] = []
    runnables = Runnables(FakeClock())

    async def drain(budget: float) -> None:
        order.append(f"drained within {budget:g}")

    runnables.add(
        Runnable("workers", Group.LEADER, run=until_cancelled(order, "cancelled"), stop=drain)
    )
    await runnables.start(Group.LEADER)
    assert await runnables.stop(Group.LEADER, budget=20)
    assert order == ["drained within 20", "cancelled"]


async def test_a_graceful_stop_is_bounded_by_the_budget() -> None:
    clock = FakeClock()
    order: list[str] = []
    runnables = Runnables(clock)

    async def hang(budget: float) -> None:
        await asyncio.Event().wait()

    runnables.add(
        Runnable("workers", Group.LEADER, run=until_cancelled(order, "cancelled"), stop=hang)
    )
    await runnables.start(Group.LEADER)
    stopping = asyncio.create_task(runnables.stop(Group.LEADER, budget=20))
    await clock.advance(19.9)
    assert not stopping.done()
    await clock.advance(0.1)
    assert await stopping is False
    assert order == ["cancelled"]


async def test_a_cancelled_stop_still_cancels_the_groups_tasks() -> None:
    order: list[str] = []
    runnables = Runnables(FakeClock())

    async def hang(budget: float) -> None:
        await asyncio.Event().wait()

    runnables.add(
        Runnable("workers", Group.LEADER, run=until_cancelled(order, "cancelled"), stop=hang)
    )
    await runnables.start(Group.LEADER)
    stopping = asyncio.create_task(runnables.stop(Group.LEADER, budget=20))
    await asyncio.sleep(0)  # one loop turn: the stop starts and hangs in `hang`
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)
    assert order == ["cancelled"]


async def test_stop_all_cancels_the_started_groups_newest_first() -> None:
    order: list[str] = []
    runnables = Runnables(FakeClock())
    for group in (Group.SERVERS, Group.CACHES, Group.LEADER):
        runnables.add(Runnable(group.name, group, run=until_cancelled(order, group.name)))
    for group in (Group.SERVERS, Group.CACHES, Group.LEADER):
        await runnables.start(group)
    await asyncio.sleep(0)  # let each task begin waiting
    await runnables.stop_all()
    assert order == ["LEADER", "CACHES", "SERVERS"]
    assert runnables.tasks() == []
