"""Applies a Plan to the cluster, in a fixed order, and stops at the first hard error.

Order: the immediate events; the child writes, phase by phase in the Plan's `WRITE_ORDER`; then
ONE status write; then the events tied to it; then (TTL) the JobSet delete.

- Job deletes and Job creates run in parallel, at most `create_parallelism` (50) at a time.
- Deletes use foreground propagation and a uid precondition (never delete a same-name successor).
  NotFound and a failed precondition mean "already gone": success.
- Creates of Jobs, the Service and PVCs treat AlreadyExists as success (names are deterministic,
  so a lagging cache can only cause a harmless duplicate create). Any other failure records the
  catalogue's Warning event (`JobCreationFailed`, `HeadlessServiceCreationFailed`,
  `PVCCreationFailed`) with the server's message and raises, so the worker retries with backoff.
- A create refused because the namespace is being deleted (403 with the `NamespaceTerminating`
  cause) ends the pass there, quietly: no event, no error, no retry, and the pass's other
  creates are cancelled. Every later create would be refused too, and the namespace's deletion
  removes the JobSet; kube-controller-manager's Job and ReplicaSet controllers ignore this
  refusal the same way. Retrying it cost 15 rounds of 250 refused creates in 47 s when a
  placement_bench namespace was slow to go (docs/benchmarks.md, 2026-11-30).
- Job patches are JSON merge patches carrying the resourceVersion the decision was based on
  (optimistic concurrency); a resume that carries container resources is a strategic merge
  patch (containers merge by name), and its refusal records `FailedResourcePropagation`. A
  resume first clears `status.startTime` through the status subresource, then patches the
  template with the resourceVersion that write returned.
- The status write is a PUT of the status subresource with the Plan's `status_resource_version`.
  A 409 raises Conflict: the key is reconciled again from fresh state; the same write is never
  retried blindly. A 404 means the JobSet was deleted during the pass: the pass ends there, with
  no counter, no after-status event and no error.
- `jobset_completed_total` / `jobset_failed_total` count only after a successful status write that
  made the transition, so a conflict and retry cannot count twice (upstream can);
  `jobset_active_deadline_exceeded_total` (KEP-1186) counts the same way, beside
  `jobset_failed_total`, when that failure is the active deadline's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar, assert_never

import structlog
from prometheus_client import CollectorRegistry, Counter

from jobset_controller.controller.resources import (
    JOBS,
    JOBSETS,
    POD_GROUPS,
    PVCS,
    SERVICES,
    WORKLOADS,
)
from jobset_controller.reconcile import (
    WRITE_ORDER,
    Event,
    JobDelete,
    JobPatch,
    Plan,
    SchedulingWrite,
    WritePhase,
)
from jobset_controller.reconcile.catalogue import (
    FAILED_RESOURCE_PROPAGATION_EVENT,
    HEADLESS_SERVICE_CREATION_FAILED_EVENT,
    JOB_CREATION_FAILED_EVENT,
    POD_GROUP_CREATION_FAILED_EVENT,
    PVC_CREATION_FAILED_EVENT,
    WARNING,
    WORKLOAD_CREATION_FAILED_EVENT,
    failed_resource_propagation_message,
    job_creation_failed_message,
)
from jobset_controller.runtime.client import (
    AlreadyExists,
    ApiError,
    Conflict,
    KubeClient,
    NotFound,
)
from jobset_controller.runtime.events import EventRecorder, ObjectRef

log = structlog.get_logger("executor")

# A resume carrying container resources (JobPatch.strategic): containers merge by name.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

T = TypeVar("T")


class JobSetMetrics:
    """Upstream's JobSet counters (names and labels are the contract), KEP-1186's, and ours:
    every restart by failure policy action and the first failed Job's failure reason
    (docs/behaviour.md#restart-timeline)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.restarts = Counter(
            "jobset_restarts",
            "Restarts of JobSets (whole or per Job) by failure policy action and by the first "
            "failed Job's failure reason",
            ["action", "reason"],
            registry=registry,
        )
        self.completed = Counter(
            "jobset_completed",
            "Total number of completed JobSets",
            ["jobset_name", "namespace"],
            registry=registry,
        )
        self.failed = Counter(
            "jobset_failed",
            "Total number of failed JobSets",
            ["jobset_name", "namespace"],
            registry=registry,
        )
        # The name and labels of KEP-1186 (gate JobSetActiveDeadlineSeconds).
        self.deadline_exceeded = Counter(
            "jobset_active_deadline_exceeded",
            "Total number of JobSets failed because their active deadline passed",
            ["jobset_name", "namespace"],
            registry=registry,
        )


def metric_reason(reason: str) -> str:
    """A Job failure reason as a label value: Kubernetes' CamelCase words pass, anything else
    (a managed Job's own reason could be any text) is folded into a bounded set."""
    if not reason:
        return "Unknown"
    if len(reason) > 64 or not reason.isascii() or not reason.isalnum():
        return "Other"
    return reason


def _summary(lines: list[str], sent: int) -> str:
    """The error a failed batch of creates raises (one line per failed Job given): its first
    line and a count, not every line.

    The workers log it (with its traceback) at every retry; a quota refusing a whole pass of
    1000 creates would otherwise log ~200 KB each time. The event keeps every line (cut to the
    Event note's limit by the recorder)."""
    first = lines[0]
    return (
        first
        if len(lines) == 1
        else f"{len(lines)} of {sent} Job creates failed; the first: {first}"
    )


class ExecutionError(Exception):
    """A write the Plan needed failed; the key is retried with backoff."""


class _NamespaceTerminating(Exception):
    """A create refused because the namespace is being deleted (module docstring)."""


async def _bounded(items: Iterable[T], limit: int, action: Callable[[T], Awaitable[None]]) -> None:
    """Run `action` over `items`, at most `limit` at a time; the first failure cancels the rest
    (no write is left running detached after the reconcile that started it has ended)."""
    semaphore = asyncio.Semaphore(limit)

    async def one(item: T) -> None:
        async with semaphore:
            await action(item)

    try:
        async with asyncio.TaskGroup() as group:
            for item in items:
                group.create_task(one(item))
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None


def _scheduling_path(namespace: str, write: SchedulingWrite) -> str:
    resource = WORKLOADS if write.kind == "Workload" else POD_GROUPS
    return resource.path(namespace, write.name)


class Executor:
    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        metrics: JobSetMetrics,
        *,
        create_parallelism: int = 50,
    ) -> None:
        self._client = client
        self._recorder = recorder
        self._metrics = metrics
        self._parallelism = create_parallelism

    async def execute(
        self,
        jobset: Mapping[str, Any],
        plan: Plan,
        *,
        on_created: Callable[[str], None] = lambda name: None,
    ) -> str | None:
        """Apply `plan`; returns the JobSet's resourceVersion after our status write, if any.
        `on_created(name)` is called for each Job this call created (not for AlreadyExists)."""
        meta = jobset["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        regarding = ObjectRef.from_object(jobset)
        for event in plan.events:
            if not event.after_status:
                self._emit(regarding, event)

        try:
            for phase in WRITE_ORDER:
                await self._write(phase, plan, regarding, namespace, on_created)
        except _NamespaceTerminating as refused:
            log.info("namespace is being deleted: creates stopped, not retried", error=str(refused))
            return None

        written: str | None = None
        if plan.status is not None:
            try:
                written = await self._write_status(
                    jobset, plan.status, plan.status_resource_version
                )
            except NotFound:
                # Deleted while this pass ran: no status to keep, nothing to count or announce,
                # and not an error (the delete event ends this key's work).
                return None
            if plan.completed:
                self._metrics.completed.labels(name, namespace).inc()
            if plan.failed:
                self._metrics.failed.labels(name, namespace).inc()
            if plan.restart is not None:
                self._metrics.restarts.labels(
                    plan.restart.action, metric_reason(plan.restart.reason)
                ).inc()
            if plan.deadline_exceeded:
                self._metrics.deadline_exceeded.labels(name, namespace).inc()
        for event in plan.events:
            if event.after_status:
                self._emit(regarding, event)
        if plan.delete_jobset:
            await self._delete(JOBSETS.path(namespace, name), str(meta.get("uid", "")))
        return written

    async def _write(
        self,
        phase: WritePhase,
        plan: Plan,
        regarding: ObjectRef,
        namespace: str,
        on_created: Callable[[str], None],
    ) -> None:
        """One phase of the child writes (mypy checks that every phase is handled here)."""
        match phase:
            case WritePhase.DELETE_JOBS:
                await self._delete_jobs(namespace, plan.jobs_to_delete)
            case WritePhase.CREATE_SERVICE:
                if plan.service_to_create is not None:
                    await self._create_other(
                        regarding,
                        SERVICES.path(namespace),
                        plan.service_to_create,
                        HEADLESS_SERVICE_CREATION_FAILED_EVENT,
                    )
            case WritePhase.CREATE_PVCS:
                for pvc in plan.pvcs_to_create:
                    await self._create_other(
                        regarding, PVCS.path(namespace), pvc, PVC_CREATION_FAILED_EVENT
                    )
            case WritePhase.DELETE_SCHEDULING:
                for write in plan.scheduling_to_delete:
                    await self._delete(_scheduling_path(namespace, write), write.uid)
            case WritePhase.CREATE_WORKLOAD:
                if plan.workload_to_create is not None:
                    await self._create_other(
                        regarding,
                        WORKLOADS.path(namespace),
                        plan.workload_to_create,
                        WORKLOAD_CREATION_FAILED_EVENT,
                    )
            case WritePhase.CREATE_POD_GROUPS:
                for pod_group in plan.pod_groups_to_create:
                    await self._create_other(
                        regarding,
                        POD_GROUPS.path(namespace),
                        pod_group,
                        POD_GROUP_CREATION_FAILED_EVENT,
                    )
            case WritePhase.PATCH_SCHEDULING:
                for write in plan.scheduling_to_patch:
                    await self._client.merge_patch(
                        _scheduling_path(namespace, write), dict(write.patch or {})
                    )
            case WritePhase.CREATE_JOBS:
                await self._create_jobs(regarding, namespace, plan.jobs_to_create, on_created)
            case WritePhase.PATCH_JOBS:
                for patch in plan.jobs_to_patch:
                    await self._patch_job(regarding, namespace, patch)
            case _:
                assert_never(phase)

    async def _write_status(
        self, jobset: Mapping[str, Any], status: Mapping[str, Any], resource_version: str | None
    ) -> str | None:
        """PUT the status subresource, conditional on the Plan's resourceVersion; returns the
        JobSet's resourceVersion after the write (None when the reply has none)."""
        meta = jobset["metadata"]
        metadata = {key: value for key, value in meta.items() if key != "resourceVersion"}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {**jobset, "metadata": metadata, "status": dict(status)}
        reply = await self._client.replace(
            JOBSETS.path(meta["namespace"], meta["name"]) + "/status", body
        )
        return str((reply.get("metadata") or {}).get("resourceVersion") or "") or None

    def _emit(self, regarding: ObjectRef, event: Event) -> None:
        self._recorder.record(regarding, event.type, event.reason, event.note)

    async def _delete_jobs(self, namespace: str, deletes: Iterable[JobDelete]) -> None:
        await _bounded(
            deletes,
            self._parallelism,
            lambda d: self._delete(JOBS.path(namespace, d.name), d.uid),
        )

    async def _delete(self, path: str, uid: str) -> None:
        try:
            await self._client.delete(path, propagation="Foreground", uid=uid or None)
        except NotFound:
            pass
        except Conflict:
            pass  # uid precondition failed: the object we meant is gone, a successor is there

    async def _create_jobs(
        self,
        regarding: ObjectRef,
        namespace: str,
        jobs: Iterable[Mapping[str, Any]],
        on_created: Callable[[str], None],
    ) -> None:
        failures: dict[str, str] = {}

        async def create(job: Mapping[str, Any]) -> None:
            name = job["metadata"]["name"]
            try:
                await self._client.create(JOBS.path(namespace), job, decode=False)
                on_created(name)
            except AlreadyExists:
                pass
            except ApiError as error:
                if error.namespace_terminating:
                    raise _NamespaceTerminating(error.message) from None  # the others stop too
                failures[name] = job_creation_failed_message(name, error.message)

        jobs = list(jobs)
        await _bounded(jobs, self._parallelism, create)
        if failures:
            # One line per Job, in the Plan's order (upstream joins its errors with newlines).
            order = [job["metadata"]["name"] for job in jobs]
            lines = [failures[name] for name in order if name in failures]
            self._recorder.record(regarding, WARNING, JOB_CREATION_FAILED_EVENT, "\n".join(lines))
            raise ExecutionError(_summary(lines, len(jobs)))

    async def _create_other(
        self, regarding: ObjectRef, path: str, body: Mapping[str, Any], reason: str
    ) -> None:
        try:
            await self._client.create(path, body, decode=False)
        except AlreadyExists:
            pass
        except ApiError as error:
            if error.namespace_terminating:
                raise _NamespaceTerminating(error.message) from None
            self._recorder.record(regarding, WARNING, reason, error.message)
            raise ExecutionError(f"{reason}: {error.message}") from error

    async def _patch_job(self, regarding: ObjectRef, namespace: str, patch: JobPatch) -> None:
        path = JOBS.path(namespace, patch.name)
        resource_version = patch.resource_version
        if patch.clear_start_time:
            updated = await self._client.merge_patch(
                path + "/status",
                {"metadata": {"resourceVersion": resource_version}, "status": {"startTime": None}},
            )
            resource_version = str(updated["metadata"]["resourceVersion"])
        body = dict(patch.patch)
        body["metadata"] = {**dict(body.get("metadata") or {}), "resourceVersion": resource_version}
        if not patch.strategic:
            await self._client.merge_patch(path, body)
        else:
            try:
                await self._client.request(
                    "PATCH", path, body=body, content_type=STRATEGIC_MERGE_PATCH
                )
            except Conflict:
                raise
            except ApiError as error:
                # A resume carrying container resources the API server refused: say why.
                note = failed_resource_propagation_message(error.message)
                self._recorder.record(regarding, WARNING, FAILED_RESOURCE_PROPAGATION_EVENT, note)
                raise ExecutionError(f"{FAILED_RESOURCE_PROPAGATION_EVENT}: {note}") from error
        log.info("patched job", job=patch.name, change=patch.reason)
