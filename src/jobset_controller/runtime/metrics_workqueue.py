"""Work queue metrics under controller-runtime's names, labels and buckets.

Why the exact names: existing controller-runtime dashboards and alerts then work unchanged.
Both labels `name` and `controller` hold the queue's (the controller's) name; `workqueue_depth`
also has `priority`, always "" for our plain FIFO queue.

- workqueue_depth (gauge): keys waiting to be handed out, i.e. dirty keys
- workqueue_adds_total (counter): adds that made a key dirty
- workqueue_queue_duration_seconds (histogram): first add until a worker takes the key
- workqueue_work_duration_seconds (histogram): a worker taking the key until done
- workqueue_unfinished_work_seconds (gauge): summed age of the work now in flight
- workqueue_longest_running_processor_seconds (gauge): age of the oldest work in flight
- workqueue_retries_total (counter): delayed adds accepted (delay above 0)

The histograms use buckets 1e-8 to 1e3 seconds, factor 10 (12 buckets, plus +Inf).

Metrics are registered on a `CollectorRegistry` the caller passes in, never on the global one.
A queue built without a provider uses `NoopWorkQueueMetricsProvider`. Times are passed in by the
queue from its own clock, so these classes read no clock themselves.
"""

from collections.abc import Hashable
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

QUEUE_DURATION_BUCKETS: Final = tuple(10.0**exponent for exponent in range(-8, 4))


class WorkQueueMetrics(Protocol):
    """What one queue reports; every method is called on the event loop with the queue's time."""

    def added(self, key: Hashable, now: float) -> None:
        """`key` became dirty (an add that was not merged into an earlier one)."""
        ...

    def taken(self, key: Hashable, now: float) -> None:
        """`key` was handed to a worker."""
        ...

    def finished(self, key: Hashable, now: float) -> None:
        """The worker holding `key` called done."""
        ...

    def retried(self) -> None:
        """A delayed add was accepted."""
        ...

    def update_unfinished_work(self, now: float) -> None:
        """Refresh the gauges about work in flight (the queue calls this periodically)."""
        ...


class WorkQueueMetricsProvider(Protocol):
    """Makes the metrics of one named queue."""

    def for_queue(self, name: str) -> WorkQueueMetrics: ...


class NoopWorkQueueMetrics:
    """Reports nothing and keeps no timings."""

    def added(self, key: Hashable, now: float) -> None:
        return None

    def taken(self, key: Hashable, now: float) -> None:
        return None

    def finished(self, key: Hashable, now: float) -> None:
        return None

    def retried(self) -> None:
        return None

    def update_unfinished_work(self, now: float) -> None:
        return None


class NoopWorkQueueMetricsProvider:
    """The provider a queue uses when the caller gives none."""

    def for_queue(self, name: str) -> WorkQueueMetrics:
        return NoopWorkQueueMetrics()


class PrometheusWorkQueueMetricsProvider:
    """Registers the seven workqueue metric families on `registry` and hands out per-queue views.

    One provider per registry (a second one would register the same names twice and fail), and
    one queue per name (two queues sharing a name would overwrite each other's gauges), so
    `for_queue` refuses a name it has already served.
    """

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self._names: set[str] = set()
        labels = ["name", "controller"]
        self.depth = Gauge(
            "workqueue_depth",
            "Keys waiting in the work queue to be handed to a worker.",
            [*labels, "priority"],
            registry=registry,
        )
        self.adds = Counter(
            "workqueue_adds",
            "Adds that made a key dirty (merged adds are not counted).",
            labels,
            registry=registry,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "Seconds from a key's first add until a worker takes it.",
            labels,
            buckets=QUEUE_DURATION_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "Seconds from a worker taking a key until it calls done.",
            labels,
            buckets=QUEUE_DURATION_BUCKETS,
            registry=registry,
        )
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "Summed age of the work in flight; a steady rise means a stuck worker.",
            labels,
            registry=registry,
        )
        self.longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "Age of the oldest work in flight.",
            labels,
            registry=registry,
        )
        self.retries = Counter(
            "workqueue_retries",
            "Adds accepted with a delay above zero (rate-limited and requeue-after adds).",
            labels,
            registry=registry,
        )

    def for_queue(self, name: str) -> WorkQueueMetrics:
        if name in self._names:
            raise ValueError(f"work queue metrics for {name!r} already exist")
        self._names.add(name)
        return PrometheusWorkQueueMetrics(self, name)


class PrometheusWorkQueueMetrics:
    """The metrics of one queue, plus the timestamps the durations are measured from.

    `_added_at` holds the first add of each dirty key (a merged add keeps the older time, so
    queue duration counts from the first request); `_started_at` holds when each in-flight key was
    taken. Both shrink as keys are taken and finished, so they stay as small as the queue.
    """

    def __init__(self, families: PrometheusWorkQueueMetricsProvider, name: str) -> None:
        self._depth = families.depth.labels(name, name, "")
        self._adds = families.adds.labels(name, name)
        self._queue_duration = families.queue_duration.labels(name, name)
        self._work_duration = families.work_duration.labels(name, name)
        self._unfinished_work = families.unfinished_work.labels(name, name)
        self._longest_running = families.longest_running.labels(name, name)
        self._retries = families.retries.labels(name, name)
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}

    def added(self, key: Hashable, now: float) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(key, now)

    def taken(self, key: Hashable, now: float) -> None:
        self._depth.dec()
        added_at = self._added_at.pop(key, None)
        if added_at is not None:
            self._queue_duration.observe(now - added_at)
        self._started_at[key] = now

    def finished(self, key: Hashable, now: float) -> None:
        started_at = self._started_at.pop(key, None)
        if started_at is not None:
            self._work_duration.observe(now - started_at)

    def retried(self) -> None:
        self._retries.inc()

    def update_unfinished_work(self, now: float) -> None:
        ages = [now - started_at for started_at in self._started_at.values()]
        self._unfinished_work.set(sum(ages))
        self._longest_running.set(max(ages, default=0.0))
