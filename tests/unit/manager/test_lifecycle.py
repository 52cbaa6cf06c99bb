"""The manager's lifecycle guarantees, phase by phase, on virtual time with stand-ins for the
parts (the whole process against a real API server is tests/integration/test_run_command.py):

- workers stop before the Lease is released, and a leader deposed while draining stops at once
  with exit code 1 without releasing;
- the final Event flush is bounded;
- a stop requested while the caches warm up exits 0, caches that never sync exit 1;
- whatever ends the run, background tasks are cancelled before anything a phase opened closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.config import Configuration
from jobset_controller.manager import Manager, ManagerOptions, _Exit, _Parts, _Tasks
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.leaderelection import LeadershipLost


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(clock: FakeClock) -> Manager:
    options = ManagerOptions(
        config=Configuration(),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        cache_sync_timeout=120.0,
    )
    return Manager(options, clock=clock)


async def forever(order: list[str], label: str) -> None:
    """Run until cancelled, then note `label` in `order`."""
    try:
        await asyncio.Event().wait()
    finally:
        order.append(label)


class Queue:
    def __init__(self, drains: bool) -> None:
        self.drains = drains

    async def shut_down_with_drain(self, timeout: float) -> bool:  # noqa: ASYNC109 - its signature
        if not self.drains:
            await asyncio.Event().wait()
        return True


class Elector:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def release(self) -> None:
        self.order.append("lease released")


class Recorder:
    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs
        self.flushed = False

    async def flush(self) -> None:
        if self.hangs:
            await asyncio.Event().wait()
        self.flushed = True


class Informer:
    async def wait_synced(self) -> None:
        await asyncio.Event().wait()  # never lists


class Controller:
    informers = (Informer(), Informer())


class Expectations:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def close(self) -> None:
        self.order.append("expectations closed")


class ClosingController:
    def __init__(self, order: list[str]) -> None:
        self.expectations = Expectations(order)


def parts(**fields: Any) -> _Parts:
    defaults: dict[str, Any] = dict.fromkeys(field.name for field in dataclasses.fields(_Parts))
    return _Parts(**{**defaults, **fields})


# ------------------------------------------------------------------------------ drain
async def test_workers_stop_before_the_lease_is_released(manager: Manager) -> None:
    order: list[str] = []
    working = asyncio.create_task(forever(order, "workers stopped"))
    renew = asyncio.create_task(forever(order, "renewal stopped"))
    manager.elector = Elector(order)  # type: ignore[assignment]
    await asyncio.sleep(0)
    drained = parts(queue=Queue(drains=True), controller=ClosingController(order))
    await manager._drain(drained, working, renew)
    assert order == [
        "workers stopped",
        "expectations closed",  # no task of the controller outlives it
        "renewal stopped",
        "lease released",
    ]


async def test_a_leader_deposed_while_draining_exits_1_at_once_without_releasing(
    manager: Manager, clock: FakeClock
) -> None:
    order: list[str] = []

    async def lose_in(seconds: float) -> None:
        await clock.sleep(seconds)
        raise LeadershipLost("gone")

    working = asyncio.create_task(forever(order, "workers stopped"))
    renew = asyncio.create_task(lose_in(1.0))
    manager.elector = Elector(order)  # type: ignore[assignment]
    draining = asyncio.create_task(manager._drain(parts(queue=Queue(drains=False)), working, renew))
    await clock.advance(0.99)
    assert not draining.done()
    await clock.advance(0.01)
    with pytest.raises(_Exit) as ended:
        await draining
    assert ended.value.code == 1
    assert "lease released" not in order
    working.cancel()


# ------------------------------------------------------------------------------ events
async def test_the_final_event_flush_is_bounded_by_five_seconds(
    manager: Manager, clock: FakeClock
) -> None:
    flushing = asyncio.create_task(manager._flush_events(Recorder(hangs=True)))  # type: ignore[arg-type]
    await clock.advance(4.99)
    assert not flushing.done()
    await clock.advance(0.01)
    assert flushing.done()
    assert flushing.exception() is None  # a warning, not a failure: the exit code stays 0


async def test_a_quick_flush_writes_everything(manager: Manager) -> None:
    recorder = Recorder(hangs=False)
    await manager._flush_events(recorder)  # type: ignore[arg-type]
    assert recorder.flushed


# ------------------------------------------------------------------------------ warm-up
async def test_a_stop_requested_while_the_caches_warm_up_exits_0(
    manager: Manager, clock: FakeClock
) -> None:
    syncing = asyncio.create_task(manager._sync_caches(parts(controller=Controller())))
    await clock.advance(60)
    assert not syncing.done()
    manager.request_stop()
    with pytest.raises(_Exit) as ended:
        await syncing
    assert ended.value.code == 0


async def test_caches_that_never_sync_exit_1_after_the_timeout(
    manager: Manager, clock: FakeClock
) -> None:
    syncing = asyncio.create_task(manager._sync_caches(parts(controller=Controller())))
    await clock.advance(119.9)
    assert not syncing.done()
    await clock.advance(0.1)
    with pytest.raises(_Exit) as ended:
        await syncing
    assert ended.value.code == 1


# ------------------------------------------------------------------------------ whole run
async def test_unloadable_credentials_exit_1_before_anything_starts(tmp_path: Path) -> None:
    options = ManagerOptions(config=Configuration(), kubeconfig=str(tmp_path / "missing"))
    manager = Manager(options)
    assert await manager.run() == 1
    assert manager.controller is None


async def test_tasks_are_cancelled_before_what_the_phases_opened_is_closed(
    manager: Manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []

    async def connect(stack: contextlib.AsyncExitStack) -> Any:
        async def close() -> None:
            order.append("client closed")

        stack.push_async_callback(close)
        return None

    async def serve(stack: contextlib.AsyncExitStack, parts: _Parts) -> None:
        async def stop() -> None:
            order.append("servers stopped")

        stack.push_async_callback(stop)

    def start_background(tasks: _Tasks, parts: _Parts) -> None:
        tasks.spawn(forever(order, "informers stopped"), "informers")

    async def sync_caches(parts: _Parts) -> None:
        await asyncio.sleep(0)
        raise _Exit(1)

    monkeypatch.setattr(manager, "_connect", connect)
    monkeypatch.setattr(manager, "_build", lambda client: parts())
    monkeypatch.setattr(manager, "_serve", serve)
    monkeypatch.setattr(manager, "_start_background", start_background)
    monkeypatch.setattr(manager, "_sync_caches", sync_caches)
    assert await manager.run() == 1
    assert order == ["informers stopped", "servers stopped", "client closed"]
