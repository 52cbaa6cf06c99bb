"""What the controller's unit tests share."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from jobset_controller.api import FeatureGates
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.controller.pods import PodPlacementController
from jobset_controller.reconcile import Plan


def offline_controller(executor: object, **options: Any) -> JobSetController:
    """A JobSetController with no API client: its informers are never started, the test fills
    their stores; `executor` records or fakes what a pass would write."""
    return JobSetController(
        object(),  # type: ignore[arg-type]  # informers are not started here
        enqueue=lambda key: None,
        executor=executor,  # type: ignore[arg-type]
        recorder=object(),  # type: ignore[arg-type]
        features=FeatureGates(),
        **options,
    )


class PlanRecorder:
    """An executor that records each Plan a pass hands it and writes nothing."""

    def __init__(self) -> None:
        self.plans: list[Plan] = []

    async def execute(
        self, jobset: Any, plan: Plan, *, on_created: Callable[[str], None] = lambda name: None
    ) -> str | None:
        self.plans.append(plan)
        return None


class StatusWriter(PlanRecorder):
    """Records each Plan and 'writes' its status into the stored JobSet, as the API would (the
    test puts `stored` into the JobSet cache when the watch would bring it)."""

    def __init__(self, stored: dict[str, Any]) -> None:
        super().__init__()
        self.stored = stored

    async def execute(
        self, jobset: Any, plan: Plan, *, on_created: Callable[[str], None] = lambda name: None
    ) -> str | None:
        self.plans.append(plan)
        if plan.status is not None:
            self.stored["status"] = copy.deepcopy(dict(plan.status))
        return ""  # a resourceVersion the stale-cache guard does not compare


def cache_children(ctl: JobSetController, plan: Plan) -> list[dict[str, Any]]:
    """Put the Jobs and the Service `plan` created into the controller's caches, each with a UID,
    as their watch events would; returns the cached Jobs (the test may change them in place)."""
    jobs = []
    for i, manifest in enumerate(plan.jobs_to_create):
        job = copy.deepcopy(dict(manifest))
        job["metadata"]["uid"] = f"job-{i}"
        jobs.append(job)
        ctl.jobs.store.put(job)
    if plan.service_to_create is not None:
        service = copy.deepcopy(dict(plan.service_to_create))
        service["metadata"]["uid"] = "service"
        ctl.services.store.put(service)
    return jobs


class ListingServer:
    """Answers the pod informer's list with `pods` and keeps its watch open, recording what was
    asked: the API server filters by the selector the informer sends."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.asked.append((path, params))
        return {"metadata": {"resourceVersion": "1"}, "items": copy.deepcopy(self.pods)}

    async def watch(
        self, path: str, *, params: Any, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}


async def synced_pod_controller(server: ListingServer) -> PodPlacementController:
    """A PodPlacementController whose pod cache has listed what `server` holds."""
    controller = PodPlacementController(
        server,  # type: ignore[arg-type]
        enqueue=lambda key: None,
        recorder=object(),  # type: ignore[arg-type]
    )
    running = asyncio.create_task(controller.pods.run())
    try:
        await asyncio.wait_for(controller.pods.wait_synced(), 10)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    return controller
