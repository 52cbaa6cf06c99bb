"""One unit per controller: its informers, queue, workers, metrics and Event recorder.

Belongs here: how a controller is assembled, and the runnables it declares. A unit names itself
once (`jobset`, `pod`: upstream's controller names) and that name is its work queue's name, the
`controller` label of its workqueue_* and controller_runtime_reconcile_* samples, and its Event
recorder's reporting controller. Each unit declares:

- one CACHES runnable per informer (`informer-<plural>`), whose readiness is "listed": a new
  informer added to a unit is part of /readyz with nothing else to write;
- an OTHERS runnable writing its Events (`<name>-events`), flushed at shutdown;
- a LEADER runnable, its workers (`<name>-workers`), drained at shutdown: the queue stops taking
  keys, in-flight reconciles finish within the budget, then the workers are cancelled, and only
  then is anything the controller keeps after them closed (`after_workers`).

The metric families are built once per registry (`SharedMetrics`) and shared by every unit, as
controller-runtime's are.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from jobset_controller.api import FeatureGates
from jobset_controller.controller.executor import Executor, JobSetMetrics
from jobset_controller.controller.gang import scheduling_api_served
from jobset_controller.controller.jobset import FailedPods, JobSetController
from jobset_controller.controller.placement_mode import PlacementMode
from jobset_controller.controller.pods import PodPlacementController
from jobset_controller.controller.restart_timeline import RestartMetrics
from jobset_controller.controller.status_counts import ProgressCountBatch
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource, wait_for
from jobset_controller.runtime.events import EventMetrics, EventRecorder
from jobset_controller.runtime.informer import Informer
from jobset_controller.runtime.metrics_workqueue import PrometheusWorkQueueMetricsProvider
from jobset_controller.runtime.runnables import Group, Runnable
from jobset_controller.runtime.switchinterval import SwitchInterval
from jobset_controller.runtime.workers import Reconcile, ReconcileMetrics, Workers
from jobset_controller.runtime.workqueue import WorkQueue

log = structlog.get_logger("manager")

JOBSET = "jobset"
POD = "pod"


@dataclass(frozen=True)
class SharedMetrics:
    """The metric families every unit labels its samples in."""

    workqueue: PrometheusWorkQueueMetricsProvider
    reconcile: ReconcileMetrics
    events: EventMetrics

    @classmethod
    def of(cls, registry: CollectorRegistry) -> SharedMetrics:
        return cls(
            workqueue=PrometheusWorkQueueMetricsProvider(registry=registry),
            reconcile=ReconcileMetrics(registry),
            events=EventMetrics(registry),
        )


@dataclass(frozen=True)
class Wiring:
    """What every unit is built from."""

    client: KubeClient
    metrics: SharedMetrics
    identity: str
    clock: Clock
    rng: RandomSource = random
    # The event recorders' client: `client` with a rate limit of its own (runtime/events.py).
    events_client: KubeClient | None = None
    # Set when the webhooks are served on their thread: the switch interval is short while a
    # reconcile runs (runtime/switchinterval.py).
    switch: SwitchInterval | None = None


@dataclass(frozen=True)
class ControllerUnit:
    """One controller's parts (module docstring)."""

    name: str
    informers: tuple[Informer, ...]
    queue: WorkQueue[str]
    workers: Workers
    recorder: EventRecorder
    clock: Clock
    after_workers: Callable[[], Awaitable[None]] | None = None

    def runnables(self) -> list[Runnable]:
        caches = [
            Runnable(
                f"informer-{informer.resource.plural}",
                Group.CACHES,
                run=informer.run,
                synced=informer.wait_synced,
                ready=informer.has_synced,
            )
            for informer in self.informers
        ]
        return [
            *caches,
            Runnable(
                f"{self.name}-events",
                Group.OTHERS,
                run=self.recorder.run,
                stop=self._flush,  # within the budget the stop is given (shutdown.py)
            ),
            Runnable(f"{self.name}-workers", Group.LEADER, run=self._work, stop=self._drain),
        ]

    async def _work(self) -> None:
        try:
            await self.workers.run()
        finally:
            if self.after_workers is not None:
                await self.after_workers()

    async def _drain(self, budget: float) -> None:
        await self.queue.shut_down_with_drain(timeout=budget)

    async def _flush(self, budget: float) -> None:
        try:
            await wait_for(self.clock, self.recorder.flush(), budget)
        except TimeoutError:
            log.warning("pending events not written before exit", controller=self.name)


def _queue_and_recorder(name: str, wiring: Wiring) -> tuple[WorkQueue[str], EventRecorder]:
    queue: WorkQueue[str] = WorkQueue(name, clock=wiring.clock, metrics=wiring.metrics.workqueue)
    recorder = EventRecorder(
        wiring.events_client or wiring.client,
        reporting_controller=name,
        reporting_instance=wiring.identity,
        clock=wiring.clock,
        metrics=wiring.metrics.events,
    )
    return queue, recorder


def _workers(
    name: str, queue: WorkQueue[str], reconcile: Reconcile, count: int, wiring: Wiring, label: str
) -> Workers:
    return Workers(
        name,
        queue,
        reconcile,
        workers=count,
        metrics=wiring.metrics.reconcile,
        object_label=label,
        clock=wiring.clock,
        switch=wiring.switch,
    )


@dataclass(frozen=True)
class PodUnit:
    """The pod controller of exclusive placement and its unit (it runs whether or not the
    webhooks are served: pods of Jobs created while they were active still need releasing)."""

    controller: PodPlacementController
    unit: ControllerUnit


def pod_unit(
    wiring: Wiring,
    *,
    workers: int,
    in_place_restart: bool = False,
    force_delete: bool = True,
    force_delete_after: float | None = None,
) -> PodUnit:
    """`in_place_restart`: the InPlaceRestart gate; the pod cache then also keeps every JobSet
    pod, trimmed for the JobSet controller's in-place pass (`jobset_unit(pods=...)`).
    `force_delete`, `force_delete_after`: the Configuration's `unreachableNodePods`."""
    queue, recorder = _queue_and_recorder(POD, wiring)
    pods = PodPlacementController(
        wiring.client,
        enqueue=queue.add,
        recorder=recorder,
        clock=wiring.clock,
        rng=wiring.rng,
        in_place_restart=in_place_restart,
        force_delete=force_delete,
        force_delete_after=force_delete_after,
    )
    unit = ControllerUnit(
        POD,
        pods.informers,
        queue,
        _workers(POD, queue, pods.reconcile, workers, wiring, "job"),
        recorder,
        wiring.clock,
        after_workers=pods.log_waiting_followers,
    )
    return PodUnit(pods, unit)


# Awaits a step of the start-up, ending the run at once if a stop is requested meanwhile
# (`Manager._unless_stopped`).
Waiter = Callable[[Coroutine[Any, Any, bool]], Awaitable[bool]]


async def workload_api_served(client: KubeClient, features: FeatureGates, wait: Waiter) -> bool:
    """The JobSet unit's discovery, before it is built: with the JobSetWorkloadAwareSchedulingAPI
    gate only, whether the API server serves the Workload and PodGroup API (controller.gang).
    Without it the controller runs and says so per JobSet (WorkloadAPIUnavailable) instead of
    failing."""
    if not features.workload_aware_scheduling:
        return False
    served = await wait(scheduling_api_served(client))
    if not served:
        log.warning(
            "JobSetWorkloadAwareSchedulingAPI is on but the API server does not serve "
            "scheduling.k8s.io/v1beta1 workloads and podgroups; gang scheduling is off"
        )
    return served


@dataclass(frozen=True)
class JobSetUnit:
    controller: JobSetController
    unit: ControllerUnit


def jobset_unit(
    wiring: Wiring,
    *,
    workers: int,
    features: FeatureGates,
    placement_mode: PlacementMode,
    registry: CollectorRegistry,
    defer_children: bool = False,
    early_job_conditions: bool = False,
    failed_pods: FailedPods | None = None,
    pods: PodPlacementController | None = None,
    scheduling_api: bool = False,
    progress_count_period: float = 0.0,
) -> JobSetUnit:
    """`progress_count_period`: the Configuration's `progressCounts.batchPeriod`
    (`controller.status_counts`; 0 writes every status at once). `pods`: with the InPlaceRestart
    gate, the pod controller whose cache the in-place pass reads; its JobSet pods' changes then
    wake this unit's JobSets. `failed_pods`: the pod cache's failed pods of a JobSet
    (`PodPlacementController.failed_pods`)."""
    queue, recorder = _queue_and_recorder(JOBSET, wiring)
    controller = JobSetController(
        wiring.client,
        placement_mode=placement_mode,
        defer_children=defer_children,
        early_job_conditions=early_job_conditions,
        failed_pods=failed_pods,
        pods=None if pods is None else pods.pods,
        scheduling_api=scheduling_api,
        enqueue=queue.add,
        executor=Executor(wiring.client, recorder, JobSetMetrics(registry)),
        restart_metrics=RestartMetrics(registry),
        recorder=recorder,
        features=features,
        clock=wiring.clock,
        rng=wiring.rng,
        progress_counts=ProgressCountBatch(wiring.clock, progress_count_period),
    )
    if pods is not None:
        pods.on_jobset_pod = controller.pod_changed
    unit = ControllerUnit(
        JOBSET,
        controller.informers,
        queue,
        _workers(JOBSET, queue, controller.reconcile, workers, wiring, "jobset"),
        recorder,
        wiring.clock,
        # Its timer only enqueues; closed once no worker is left to wait on it.
        after_workers=controller.expectations.close,
    )
    return JobSetUnit(controller, unit)
