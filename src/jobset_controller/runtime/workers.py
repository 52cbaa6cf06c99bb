"""Worker tasks: take a key from the queue, reconcile it, decide what happens to the key next.

The rules are controller-runtime's, so behaviour and metrics match upstream:

- success: `forget` the key (its backoff resets);
- success with `requeue_after`: forget, then `add_after(requeue_after)`;
- an exception: logged with the key and a traceback (a 409 Conflict, which only means a cache
  lagged a write, without one), counted, and the key is re-added with the rate limiter's
  backoff (5 ms doubling to 1000 s per key). A failing key never kills its worker, another
  worker, or the process; other keys keep flowing;
- a `TerminalError`: the reconcile says retrying cannot help; counted as an error and in
  `controller_runtime_terminal_reconcile_errors_total`, and the key is forgotten, not re-added
  (it runs again when its object changes), as controller-runtime treats reconcile.TerminalError;
- a panic, Python's equivalent of a Go panic: an exception of a type that means a bug in the code
  rather than a failure of the world (`PANIC_TYPES`: a missing key or attribute, a wrong type, a
  failed assertion, ...). controller-runtime recovers panics, counts them in
  `controller_runtime_reconcile_panics_total` and retries; so do we, logging it as a bug. Failures
  of the world (API errors, timeouts, connection errors) are plain errors;
- `done(key)` always, so a key added while it was being reconciled runs again afterwards.

Every reconcile gets a fresh `reconcile_id`, bound with the key's parts into structlog's context
variables, so every log line written during it carries `reconcile_id`, `namespace` and the object
name under the label the caller chooses (`jobset` for the JobSet controller).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from jobset_controller.runtime.client import Conflict
from jobset_controller.runtime.clock import Clock, RealClock
from jobset_controller.runtime.switchinterval import SwitchInterval
from jobset_controller.runtime.workqueue import QueueShutDown, WorkQueue

log = structlog.get_logger("workers")

RECONCILE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
    0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip


# Exception types that mean the reconcile code itself is wrong (what would be a panic in Go:
# nil dereference, index out of range, a failed type assertion), not that a call failed.
PANIC_TYPES: tuple[type[Exception], ...] = (
    ArithmeticError,
    AssertionError,
    AttributeError,
    LookupError,
    NameError,
    RecursionError,
    TypeError,
)


class TerminalError(Exception):
    """Raised by a reconcile when retrying the key cannot succeed (the object must change first)."""


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for besides success: look again after `requeue_after` seconds."""

    requeue_after: float | None = None


Reconcile = Callable[[str], Awaitable[Result | None]]


class ReconcileMetrics:
    """The controller_runtime_* reconcile metric families of one registry, shared by every
    controller of the process (each labels its samples `controller=<name>`, as
    controller-runtime's do); build one per registry and hand it to each `Workers`."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.total = Counter(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.errors = Counter(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_TIME_BUCKETS,
            registry=registry,
        )
        self.active = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=registry,
        )
        self.max_workers = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=registry,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.panics = Counter(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            ["controller"],
            registry=registry,
        )

    def declare(self, controller: str, workers: int) -> None:
        """Create `controller`'s samples at 0 (a dashboard sees 0, not "no data")."""
        self.max_workers.labels(controller).set(workers)
        for result in ("success", "error", "requeue", "requeue_after"):
            self.total.labels(controller, result)
        for family in (self.errors, self.terminal_errors, self.panics):
            family.labels(controller)


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.rpartition("/")
    return namespace, name


class Workers:
    """N tasks draining one queue through one reconcile function; its metrics are labelled
    `controller=<name>` in the families given (unregistered ones when none are). With `switch`,
    each reconcile runs inside its `busy()` block (runtime/switchinterval.py)."""

    def __init__(
        self,
        name: str,
        queue: WorkQueue[str],
        reconcile: Reconcile,
        *,
        workers: int = 1,
        metrics: ReconcileMetrics | None = None,
        object_label: str = "name",
        clock: Clock | None = None,
        switch: SwitchInterval | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.name = name
        self._queue = queue
        self._reconcile = reconcile
        self._count = workers
        self._object_label = object_label
        self._clock: Clock = clock or RealClock()
        self.switch = switch
        self.metrics = metrics or ReconcileMetrics(None)
        self.metrics.declare(name, workers)

    async def run(self) -> None:
        """Run the workers until the queue shuts down (or this task is cancelled)."""
        async with asyncio.TaskGroup() as group:
            for index in range(self._count):
                group.create_task(self._worker(index))

    async def _worker(self, index: int) -> None:
        while True:
            try:
                key = await self._queue.get()
            except QueueShutDown:
                return
            try:
                await self._process(key)
            finally:
                self._queue.done(key)

    async def _process(self, key: str) -> None:
        namespace, name = split_key(key)
        controller = self.name
        with structlog.contextvars.bound_contextvars(
            controller=controller,
            namespace=namespace,
            reconcile_id=str(uuid.uuid4()),
            **{self._object_label: name},
        ):
            self.metrics.active.labels(controller).inc()
            started = self._clock.now()
            try:
                with self.switch.busy() if self.switch is not None else nullcontext():
                    result = await self._reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.metrics.total.labels(controller, "error").inc()
                self.metrics.errors.labels(controller).inc()
                retries = self._queue.num_requeues(key)
                if isinstance(error, TerminalError):
                    self.metrics.terminal_errors.labels(controller).inc()
                    log.error("reconcile failed terminally, not retrying", error=str(error))
                    self._queue.forget(key)
                    return
                if isinstance(error, Conflict):
                    # Expected when a cache lags a write: no traceback, just look again.
                    log.info("conflict, will retry from fresh state", retries=retries)
                elif isinstance(error, PANIC_TYPES):
                    self.metrics.panics.labels(controller).inc()
                    log.exception("reconcile panicked (a bug), will retry with backoff")
                else:
                    log.exception("reconcile failed, will retry with backoff", retries=retries)
                self._queue.add_rate_limited(key)
                return
            finally:
                self.metrics.time.labels(controller).observe(self._clock.now() - started)
                self.metrics.active.labels(controller).dec()
            self._queue.forget(key)
            if result is not None and result.requeue_after is not None:
                self.metrics.total.labels(controller, "requeue_after").inc()
                self._queue.add_after(key, result.requeue_after)
            else:
                self.metrics.total.labels(controller, "success").inc()
