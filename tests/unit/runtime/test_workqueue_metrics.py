"""Work queue metrics: controller-runtime's names, labels and buckets, and values that follow the
queue (depth, adds, retries, durations, work in flight)."""

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.metrics_workqueue import (
    QUEUE_DURATION_BUCKETS,
    PrometheusWorkQueueMetricsProvider,
)
from jobset_controller.runtime.workqueue import WorkQueue

NAME = "jobset"
LABELS = {"name": NAME, "controller": NAME}


@pytest.fixture
async def queue(clock: FakeClock, registry: CollectorRegistry) -> AsyncIterator[WorkQueue[str]]:
    provider = PrometheusWorkQueueMetricsProvider(registry=registry)
    work_queue: WorkQueue[str] = WorkQueue(NAME, clock=clock, metrics=provider)
    yield work_queue
    work_queue.shutdown()


def sample(registry: CollectorRegistry, name: str, **extra_labels: str) -> float | None:
    return registry.get_sample_value(name, {**LABELS, **extra_labels})


def depth(registry: CollectorRegistry) -> float | None:
    return sample(registry, "workqueue_depth", priority="")


SERIES = [
    ("workqueue_depth", {"priority": ""}),
    ("workqueue_adds_total", {}),
    ("workqueue_queue_duration_seconds_count", {}),
    ("workqueue_work_duration_seconds_count", {}),
    ("workqueue_unfinished_work_seconds", {}),
    ("workqueue_longest_running_processor_seconds", {}),
    ("workqueue_retries_total", {}),
]


@pytest.mark.usefixtures("queue")
@pytest.mark.parametrize(("metric", "extra_labels"), SERIES, ids=[name for name, _ in SERIES])
def test_every_series_exists_at_zero_with_name_and_controller_labels(
    registry: CollectorRegistry, metric: str, extra_labels: dict[str, str]
) -> None:
    assert sample(registry, metric, **extra_labels) == 0.0


@pytest.mark.usefixtures("queue")
def test_histograms_use_buckets_from_1e_8_to_1e3(registry: CollectorRegistry) -> None:
    assert list(QUEUE_DURATION_BUCKETS) == [
        1e-8,
        1e-7,
        1e-6,
        1e-5,
        1e-4,
        1e-3,
        1e-2,
        1e-1,
        1.0,
        10.0,
        100.0,
        1000.0,
    ]
    exposition = generate_latest(registry).decode()
    for bound in ["1e-08", "0.001", "1000.0", "+Inf"]:
        assert f'workqueue_queue_duration_seconds_bucket{{controller="jobset",le="{bound}"' in (
            exposition
        )
        assert f'workqueue_work_duration_seconds_bucket{{controller="jobset",le="{bound}"' in (
            exposition
        )


async def test_depth_counts_keys_waiting_to_be_handed_out(
    queue: WorkQueue[str], registry: CollectorRegistry
) -> None:
    queue.add("ns/a")
    queue.add("ns/b")
    queue.add("ns/a")
    assert depth(registry) == 2
    key = await queue.get()
    assert depth(registry) == 1
    queue.add(key)  # dirty again while in flight: it will be handed out again
    assert depth(registry) == 2
    queue.done(key)
    assert depth(registry) == 2
    await queue.get()
    await queue.get()
    assert depth(registry) == 0


async def test_adds_count_only_adds_that_make_a_key_dirty(
    queue: WorkQueue[str], registry: CollectorRegistry
) -> None:
    for key in ["ns/a", "ns/a", "ns/b", "ns/a"]:
        queue.add(key)
    assert sample(registry, "workqueue_adds_total") == 2
    key = await queue.get()
    queue.add(key)
    assert sample(registry, "workqueue_adds_total") == 3


@pytest.mark.parametrize(
    ("delay", "expected_retries"),
    [(0.0, 0), (-1.0, 0), (0.5, 1)],
    ids=["zero-delay", "negative-delay", "positive-delay"],
)
async def test_retries_count_delayed_adds_with_a_delay_above_zero(
    queue: WorkQueue[str], registry: CollectorRegistry, delay: float, expected_retries: int
) -> None:
    queue.add_after("ns/a", delay)
    assert sample(registry, "workqueue_retries_total") == expected_retries


async def test_retries_count_every_rate_limited_add(
    queue: WorkQueue[str], registry: CollectorRegistry
) -> None:
    for _ in range(3):
        queue.add_rate_limited("ns/a")
    assert sample(registry, "workqueue_retries_total") == 3


async def test_queue_duration_runs_from_the_first_add_to_get(
    queue: WorkQueue[str], clock: FakeClock, registry: CollectorRegistry
) -> None:
    queue.add("ns/a")
    await clock.advance(1.0)
    queue.add("ns/a")  # merged: does not restart the clock
    await clock.advance(1.0)
    await queue.get()
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 2.0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="10.0") == 1


async def test_work_duration_runs_from_get_to_done(
    queue: WorkQueue[str], clock: FakeClock, registry: CollectorRegistry
) -> None:
    queue.add("ns/a")
    key = await queue.get()
    await clock.advance(3.0)
    queue.done(key)
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1
    assert sample(registry, "workqueue_work_duration_seconds_sum") == 3.0


async def test_in_flight_gauges_follow_work_that_has_not_finished(
    queue: WorkQueue[str], clock: FakeClock, registry: CollectorRegistry
) -> None:
    queue.add("ns/a")
    queue.add("ns/b")
    first = await queue.get()
    await clock.advance(1.0)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 1.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 1.0

    second = await queue.get()
    await clock.advance(1.0)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 3.0  # 2 s + 1 s
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 2.0

    queue.done(first)
    queue.done(second)
    await clock.advance(0.5)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0.0


def test_a_second_queue_with_the_same_name_is_refused(registry: CollectorRegistry) -> None:
    provider = PrometheusWorkQueueMetricsProvider(registry=registry)
    provider.for_queue("jobset")
    with pytest.raises(ValueError, match="already exist"):
        provider.for_queue("jobset")


def test_queues_with_different_names_report_separately(
    clock: FakeClock, registry: CollectorRegistry
) -> None:
    provider = PrometheusWorkQueueMetricsProvider(registry=registry)
    first: WorkQueue[str] = WorkQueue("first", clock=clock, metrics=provider)
    second: WorkQueue[str] = WorkQueue("second", clock=clock, metrics=provider)
    first.add("ns/a")
    second.add("ns/a")
    second.add("ns/b")
    for name, expected in [("first", 1), ("second", 2)]:
        labels = {"name": name, "controller": name}
        assert registry.get_sample_value("workqueue_adds_total", labels) == expected


def test_exposition_uses_controller_runtime_names(registry: CollectorRegistry) -> None:
    PrometheusWorkQueueMetricsProvider(registry=registry).for_queue(NAME)
    exposition = generate_latest(registry).decode()
    for line in [
        'workqueue_depth{controller="jobset",name="jobset",priority=""} 0.0',
        'workqueue_adds_total{controller="jobset",name="jobset"} 0.0',
        'workqueue_retries_total{controller="jobset",name="jobset"} 0.0',
        'workqueue_unfinished_work_seconds{controller="jobset",name="jobset"} 0.0',
        'workqueue_longest_running_processor_seconds{controller="jobset",name="jobset"} 0.0',
    ]:
        assert line in exposition.splitlines()


async def test_queue_without_metrics_registers_nothing(clock: FakeClock) -> None:
    queue: WorkQueue[str] = WorkQueue(NAME, clock=clock)
    queue.add("ns/a")
    queue.done(await queue.get())
    queue.shutdown()
    assert await queue.shut_down_with_drain() is True
