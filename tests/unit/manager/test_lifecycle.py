"""The manager's stop and start guarantees, on virtual time with stand-ins for the parts (the
whole process against a real API server is tests/integration/test_run_command.py):

- workers stop before the Lease is released, and Events are flushed after it;
- a leader deposed while draining stops at once, without releasing;
- a deposed leader's workers are cancelled at once, then its recorded Events are written, within
  their own bound;
- the final Event flush is bounded;
- a stop requested while the caches warm up exits 0, caches that never sync exit 1;
- credentials that cannot be loaded exit 1 before anything is built.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from jobset_controller.config import Configuration
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller.manager.controllers import ControllerUnit
from jobset_controller.manager.lifecycle import _Exit
from jobset_controller.manager.shutdown import Deposed, stop_deposed, stop_gracefully
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.leaderelection import LeadershipLost
from jobset_controller.runtime.runnables import Group, Runnable, Runnables
from jobset_controller.runtime.workers import Workers
from jobset_controller.runtime.workqueue import WorkQueue


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def forever(order: list[str], label: str) -> None:
    """Run until cancelled, then note `label` in `order`."""
    try:
        await asyncio.Event().wait()
    finally:
        order.append(label)


class Elector:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def release(self) -> None:
        self.order.append("lease released")


class Recorder:
    """An Event recorder whose flush hangs or notes itself."""

    def __init__(self, order: list[str], *, hangs: bool = False) -> None:
        self.order, self.hangs = order, hangs

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def flush(self) -> None:
        if self.hangs:
            await asyncio.Event().wait()
        self.order.append("events flushed")


def unit(clock: FakeClock, order: list[str], *, hangs: bool = False) -> ControllerUnit:
    """A controller unit with an empty queue and no informers."""
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)

    async def reconcile(key: str) -> None:
        return None

    async def closed() -> None:
        order.append("workers stopped")

    return ControllerUnit(
        "test",
        (),
        queue,
        Workers("test", queue, reconcile, clock=clock),
        Recorder(order, hangs=hangs),  # type: ignore[arg-type]
        clock,
        after_workers=closed,
    )


async def started(runnables: Runnables, *parts: Runnable) -> Runnables:
    for part in parts:
        runnables.add(part)
    for group in Group:
        if group != Group.CACHES:
            await runnables.start(group)
    return runnables


# ------------------------------------------------------------------------------ stop
async def test_workers_stop_before_the_lease_is_released_and_events_are_flushed_after(
    clock: FakeClock,
) -> None:
    order: list[str] = []
    runnables = await started(Runnables(clock), *unit(clock, order).runnables())
    renew = asyncio.create_task(forever(order, "renewal stopped"))
    await stop_gracefully(
        runnables,
        renew=renew,
        elector=Elector(order),  # type: ignore[arg-type]
        shutdown_timeout=20,
        event_flush_timeout=5,
    )
    assert order == ["workers stopped", "renewal stopped", "lease released", "events flushed"]


async def deposed_while_draining(clock: FakeClock, order: list[str]) -> None:
    """A graceful stop whose workers never drain, and whose Lease is lost a second in: returns
    once the stop has raised Deposed, with every task it made out of reach."""

    async def never_drains(budget: float) -> None:
        await asyncio.Event().wait()

    async def lose_in(seconds: float) -> None:
        await clock.sleep(seconds)
        raise LeadershipLost("gone")

    runnables = await started(
        Runnables(clock),
        Runnable(
            "workers",
            Group.LEADER,
            run=lambda: forever(order, "workers stopped"),
            stop=never_drains,
        ),
    )
    renew = asyncio.create_task(lose_in(1.0))
    stopping = asyncio.create_task(
        stop_gracefully(
            runnables,
            renew=renew,
            elector=Elector(order),  # type: ignore[arg-type]
            shutdown_timeout=20,
            event_flush_timeout=5,
        )
    )
    await clock.advance(0.99)
    assert not stopping.done()
    await clock.advance(0.01)
    with pytest.raises(Deposed):
        await stopping


async def test_a_leader_deposed_while_draining_stops_at_once_without_releasing(
    clock: FakeClock,
) -> None:
    order: list[str] = []
    await deposed_while_draining(clock, order)
    assert order == ["workers stopped"]  # cancelled at once, and no release


async def test_a_leader_deposed_while_draining_reads_why_and_leaves_no_error_for_the_collector(
    clock: FakeClock,
) -> None:
    """The renewal's LeadershipLost is read when the stop gives up: one left unread is logged
    again, with a traceback, whenever the task is collected (such a late log once broke an
    unrelated test's parse on CPython 3.11.7: tests/source_trees.py)."""
    unread: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unread.append(context))
    await deposed_while_draining(clock, [])
    gc.collect()
    assert unread == []


async def test_a_deposed_leader_cancels_its_workers_then_writes_its_recorded_events(
    clock: FakeClock,
) -> None:
    order: list[str] = []

    async def never_drains(budget: float) -> None:
        order.append("drained")  # a graceful drain: must not be asked for

    runnables = await started(
        Runnables(clock),
        *unit(clock, order).runnables(),
        Runnable("slow", Group.LEADER, run=lambda: forever(order, "slow"), stop=never_drains),
    )
    await asyncio.sleep(0)  # the workers are running
    await stop_deposed(runnables, event_flush_timeout=45)
    assert sorted(order[:2]) == ["slow", "workers stopped"]  # cancelled, not drained
    assert order[2:] == ["events flushed"]


async def test_a_deposed_leaders_event_flush_is_bounded_by_its_own_timeout(
    clock: FakeClock,
) -> None:
    order: list[str] = []
    runnables = await started(Runnables(clock), *unit(clock, order, hangs=True).runnables())
    stopping = asyncio.create_task(stop_deposed(runnables, event_flush_timeout=45))
    await clock.advance(44.99)  # longer than a graceful stop's 5 s: the API server may be away
    assert not stopping.done()
    await clock.advance(0.01)
    await stopping
    assert order == ["workers stopped"]


async def test_the_final_event_flush_is_bounded_by_its_timeout(clock: FakeClock) -> None:
    order: list[str] = []
    runnables = await started(Runnables(clock), *unit(clock, order, hangs=True).runnables())
    stopping = asyncio.create_task(
        stop_gracefully(
            runnables, renew=None, elector=None, shutdown_timeout=20, event_flush_timeout=5
        )
    )
    await clock.advance(4.99)
    assert not stopping.done()
    await clock.advance(0.01)
    await stopping  # a warning, not a failure: the exit code stays 0
    assert order == ["workers stopped"]


# ------------------------------------------------------------------------------ start
@pytest.fixture
def manager(clock: FakeClock) -> Manager:
    options = ManagerOptions(
        config=Configuration(),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
    )
    manager = Manager(options, clock=clock)
    manager.runnables.add(Runnable("informer-pods", Group.CACHES, synced=asyncio.Event().wait))
    return manager


async def test_a_stop_requested_while_the_caches_warm_up_exits_0(
    manager: Manager, clock: FakeClock
) -> None:
    syncing = asyncio.create_task(manager._sync_caches())
    await clock.advance(60)
    assert not syncing.done()
    manager.request_stop()
    with pytest.raises(_Exit) as ended:
        await syncing
    assert ended.value.code == 0
    await manager.runnables.stop_all()


async def test_caches_that_never_sync_exit_1_after_the_timeout(
    manager: Manager, clock: FakeClock
) -> None:
    syncing = asyncio.create_task(manager._sync_caches())
    await clock.advance(119.9)
    assert not syncing.done()
    await clock.advance(0.1)
    with pytest.raises(_Exit) as ended:
        await syncing
    assert ended.value.code == 1
    await manager.runnables.stop_all()


async def test_unloadable_credentials_exit_1_before_anything_is_built(tmp_path: Path) -> None:
    options = ManagerOptions(config=Configuration(), kubeconfig=str(tmp_path / "missing"))
    manager = Manager(options)
    assert await manager.run() == 1
    assert manager.controller is None


def test_a_deposed_leaders_flush_lasts_as_long_as_the_recorders_retries() -> None:
    """config.DEPOSED_EVENT_FLUSH_TIMEOUT restates the Event recorder's retry horizon (config.py
    may not import the recorder: every command reads config at start-up); a change to either
    must carry to the other."""
    from jobset_controller.config import DEPOSED_EVENT_FLUSH_TIMEOUT
    from jobset_controller.runtime.events import WRITE_RETRY_DELAYS

    assert abs(DEPOSED_EVENT_FLUSH_TIMEOUT - sum(WRITE_RETRY_DELAYS)) <= 1.0
