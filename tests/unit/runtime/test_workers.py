"""Worker tasks: errors are retried with backoff and never kill a worker; requeue-after works."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from prometheus_client import CollectorRegistry

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.switchinterval import SwitchInterval
from jobset_controller.runtime.workers import ReconcileMetrics, Result, TerminalError, Workers
from jobset_controller.runtime.workqueue import WorkQueue


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_a_raising_reconcile_is_retried_with_backoff_and_the_worker_survives() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    registry = CollectorRegistry()
    calls: list[tuple[str, float]] = []

    async def reconcile(key: str) -> Result | None:
        calls.append((key, clock.now()))
        if key == "ns/bad" and len([c for c in calls if c[0] == key]) <= 3:
            raise RuntimeError("boom")
        return None

    workers = Workers("test", queue, reconcile, metrics=ReconcileMetrics(registry))
    task = asyncio.create_task(workers.run())
    queue.add("ns/bad")
    queue.add("ns/good")
    await clock.settle()
    for _ in range(3):
        await clock.advance(0.1)
    bad_times = [t for k, t in calls if k == "ns/bad"]
    assert len(bad_times) == 4
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(bad_times)]
    assert gaps == [0.005, 0.01, 0.02]  # client-go's per-item exponential backoff
    assert ("ns/good", 0.0) in calls
    assert not task.done()
    assert queue.num_requeues("ns/bad") == 0  # forgotten after the success
    assert sample(registry, "controller_runtime_reconcile_errors_total", controller="test") == 3
    assert (
        sample(registry, "controller_runtime_reconcile_total", controller="test", result="success")
        == 2
    )
    queue.shutdown()
    await asyncio.wait_for(task, 1)


async def test_requeue_after_brings_the_key_back_later() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    registry = CollectorRegistry()
    seen: list[float] = []

    async def reconcile(key: str) -> Result | None:
        seen.append(clock.now())
        return Result(requeue_after=30.0) if len(seen) == 1 else None

    task = asyncio.create_task(
        Workers("test", queue, reconcile, metrics=ReconcileMetrics(registry)).run()
    )
    queue.add("ns/a")
    await clock.settle()
    await clock.advance(29.0)
    assert seen == [0.0]
    await clock.advance(1.0)
    assert seen == [0.0, 30.0]
    assert (
        sample(
            registry,
            "controller_runtime_reconcile_total",
            controller="test",
            result="requeue_after",
        )
        == 1
    )
    queue.shutdown()
    await asyncio.wait_for(task, 1)


async def test_all_result_labels_are_preset_to_zero() -> None:
    registry = CollectorRegistry()
    queue: WorkQueue[str] = WorkQueue("test", clock=FakeClock())

    async def reconcile(key: str) -> Result | None:
        return None

    Workers("jobset", queue, reconcile, metrics=ReconcileMetrics(registry), workers=3)
    for result in ("success", "error", "requeue", "requeue_after"):
        assert (
            registry.get_sample_value(
                "controller_runtime_reconcile_total", {"controller": "jobset", "result": result}
            )
            == 0
        )
    assert (
        sample(registry, "controller_runtime_max_concurrent_reconciles", controller="jobset") == 3
    )


async def test_workers_stop_when_the_queue_shuts_down() -> None:
    queue: WorkQueue[str] = WorkQueue("test", clock=FakeClock())

    async def reconcile(key: str) -> Result | None:
        return None

    task = asyncio.create_task(Workers("test", queue, reconcile, workers=2).run())
    await asyncio.sleep(0)  # one loop turn: the workers start and block in get()
    queue.shutdown()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(task, 1)
    assert task.done()


async def test_a_panic_is_counted_and_retried_and_plain_errors_are_not_panics() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    registry = CollectorRegistry()
    calls: list[str] = []

    async def reconcile(key: str) -> Result | None:
        calls.append(key)
        if key == "ns/bug" and calls.count(key) == 1:
            raise KeyError("metadata")  # a bug in the reconcile: Go would panic here
        if key == "ns/world" and calls.count(key) == 1:
            raise TimeoutError("the API server did not answer")
        return None

    task = asyncio.create_task(
        Workers("test", queue, reconcile, metrics=ReconcileMetrics(registry)).run()
    )
    queue.add("ns/bug")
    queue.add("ns/world")
    await clock.settle()
    await clock.advance(0.1)
    assert calls.count("ns/bug") == 2  # recovered and retried, like controller-runtime
    assert calls.count("ns/world") == 2
    assert sample(registry, "controller_runtime_reconcile_panics_total", controller="test") == 1
    assert sample(registry, "controller_runtime_reconcile_errors_total", controller="test") == 2
    queue.shutdown()
    await asyncio.wait_for(task, 1)


async def test_a_terminal_error_is_counted_and_the_key_is_not_retried() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    registry = CollectorRegistry()
    calls: list[str] = []

    async def reconcile(key: str) -> Result | None:
        calls.append(key)
        raise TerminalError("the spec can never be satisfied")

    task = asyncio.create_task(
        Workers("test", queue, reconcile, metrics=ReconcileMetrics(registry)).run()
    )
    queue.add("ns/stuck")
    await clock.settle()
    await clock.advance(100.0)
    assert calls == ["ns/stuck"]
    assert queue.num_requeues("ns/stuck") == 0
    labels = {"controller": "test"}
    assert sample(registry, "controller_runtime_terminal_reconcile_errors_total", **labels) == 1
    assert sample(registry, "controller_runtime_reconcile_errors_total", **labels) == 1
    assert sample(registry, "controller_runtime_reconcile_panics_total", **labels) == 0
    queue.shutdown()
    await asyncio.wait_for(task, 1)


async def test_with_a_switch_each_reconcile_runs_inside_its_busy_block_error_or_not() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("test", clock=clock)
    switch = SwitchInterval(get=lambda: 0.005, set_=lambda value: None)
    open_during: list[int] = []

    async def reconcile(key: str) -> Result | None:
        open_during.append(switch.open)
        await asyncio.sleep(0)
        if key == "ns/bad":
            raise RuntimeError("boom")
        return None

    task = asyncio.create_task(Workers("test", queue, reconcile, workers=2, switch=switch).run())
    queue.add("ns/good")
    queue.add("ns/bad")
    await clock.settle()
    assert open_during == [1, 2]  # both workers' reconciles overlapped, each counted
    assert switch.open == 0  # closed after the success and after the failure
    queue.shutdown()
    await asyncio.wait_for(task, 1)
