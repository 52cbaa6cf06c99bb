"""The JobSet controller: key -> snapshot from the caches -> pure reconcile -> executor.

Stale caches: right after our own status write the JobSet cache can still hold the previous
version; reconciling that would redo work and end in a 409. So the controller remembers the
resourceVersion its last status write produced per JobSet and does not reconcile a cached copy
older than that (resourceVersions compare as integers since Kubernetes 1.35); the watch event
for our write enqueues the key again once the cache has caught up. Likewise for the Jobs a pass
creates: the next pass waits until the Job cache has shown all of them (`expectations`), so it
neither redoes creates nor counts from part of the children.

Nothing here decides JobSet behaviour; that is all in `reconcile`. This module only gathers the
inputs (the JobSet, read from its cache once per pass; its Jobs by owner UID, its Service, the
names of the PVCs in its namespace, the feature gates, the time, the exclusive-placement mode)
and hands the Plan to the executor. A JobSet that cannot even be parsed gets a Warning event and
is not retried (retrying cannot fix it; its next change enqueues it again).

With the InPlaceRestart gate, the pod cache of exclusive placement (`pods.py`, which then also
keeps every JobSet pod trimmed for the in-place pass) is an input too: a pass of a JobSet using the
InPlaceRestart strategy reads its pods by the `<namespace>/<jobset name>` index
(`Snapshot.pods`), and a change of what that pass reads of a pod wakes the JobSet
(`pod_changed`); pods of JobSets with another strategy wake nothing.

The exclusive-placement mode is an input like the others (`Snapshot.pod_webhooks`, read without
I/O), but it must not be stale when Jobs are built from it (`placement_mode`): when a plan creates
Jobs whose placement depends on it (affinity-strategy exclusive Jobs) and the mode is older than
`PROBE_PERIOD`, the controller awaits a fresh probe before executing, and if the mode changed,
reconciles the same snapshot again with the new mode. Any other pass, and every pass of a JobSet
without exclusive placement, reads the mode as it is and never probes.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from jobset_controller import api, reconcile
from jobset_controller.api import FeatureGates
from jobset_controller.api.constants import RestartStrategy
from jobset_controller.api.naming import jobset_subdomain
from jobset_controller.controller.create_expectations import CreateExpectations
from jobset_controller.controller.delete_expectations import DeleteExpectations
from jobset_controller.controller.executor import Executor
from jobset_controller.controller.gang import build_scheduling_informers
from jobset_controller.controller.informers import OWNER_UID, build_informers
from jobset_controller.controller.placement_mode import PlacementMode
from jobset_controller.controller.pods import JOBSET_PODS
from jobset_controller.controller.restart_timeline import RestartMetrics, RestartTimeline
from jobset_controller.controller.status_counts import ProgressCountBatch
from jobset_controller.reconcile import Plan, Snapshot
from jobset_controller.reconcile.catalogue import (
    INVALID_JOBSET_EVENT,
    NORMAL,
    RESTART_COMPLETED_EVENT,
    WARNING,
    invalid_jobset_message,
)
from jobset_controller.reconcile.classify import JOB_FAILED, JOB_FAILURE_TARGET
from jobset_controller.reconcile.jobs import true_condition
from jobset_controller.reconcile.placement import uses_affinity_strategy
from jobset_controller.reconcile.timestamps import format_time
from jobset_controller.runtime.client import Conflict, KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.events import EventRecorder, ObjectRef
from jobset_controller.runtime.informer import Informer
from jobset_controller.runtime.workers import Result

log = structlog.get_logger("jobset-controller")

# (namespace, JobSet name) -> the JobSet's failed pods as the pod cache keeps them.
FailedPods = Callable[[str, str], tuple[Mapping[str, Any], ...]]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pod_annotations(job: Mapping[str, Any]) -> Mapping[str, Any]:
    template = (job.get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("annotations") or {}


def _uses_in_place_restart(raw: Mapping[str, Any]) -> bool:
    policy = (raw.get("spec") or {}).get("failurePolicy") or {}
    return bool(policy.get("restartStrategy") == RestartStrategy.IN_PLACE_RESTART)


def _has_failed_job(jobs: tuple[Mapping[str, Any], ...]) -> bool:
    """Some Job has a Failed or FailureTarget condition that is True (cheap; reconcile decides
    which of them count)."""
    return any(
        true_condition(job, JOB_FAILED) or true_condition(job, JOB_FAILURE_TARGET) for job in jobs
    )


def creates_mode_dependent_jobs(plan: Plan) -> bool:
    """The plan creates a Job whose placement the mode decides (the affinity strategy of
    exclusive placement: leader/follower or affinity in the template)."""
    return any(uses_affinity_strategy(_pod_annotations(job)) for job in plan.jobs_to_create)


class JobSetController:
    """Owns the JobSet, Job, Service and PVC informers (with gang scheduling served, the
    Workload and PodGroup ones too) and reconciles one key at a time."""

    def __init__(
        self,
        client: KubeClient,
        *,
        enqueue: Callable[[str], None],
        executor: Executor,
        recorder: EventRecorder,
        features: FeatureGates,
        now: Callable[[], datetime.datetime] = _utc_now,
        clock: Clock | None = None,
        rng: RandomSource = random,
        placement_mode: PlacementMode | None = None,
        defer_children: bool = False,
        early_job_conditions: bool = False,
        failed_pods: FailedPods | None = None,
        pods: Informer | None = None,
        scheduling_api: bool = False,
        restart_metrics: RestartMetrics | None = None,
        progress_counts: ProgressCountBatch | None = None,
    ) -> None:
        """`placement_mode` says whether the pod webhooks are active (None: never, the
        affinity-in-job fallback; nothing is probed). `defer_children` is the Configuration's
        `deferredChildren.enable` (`Snapshot.defer_children`). `early_job_conditions` is
        `earlyJobConditions.enable` or `--early-job-conditions` (`Snapshot.early_job_conditions`).
        `failed_pods`: the pod cache's failed pods of a JobSet (`Snapshot.failed_pods`).
        `pods`: the pod cache indexed
        by JobSet (`pods.JOBSET_PODS`), given with the InPlaceRestart gate only.
        `scheduling_api`: with the JobSetWorkloadAwareSchedulingAPI gate, discovery found
        scheduling.k8s.io/v1beta1; the Workload and PodGroup informers are then built here
        (`controller.gang`). `progress_counts`: when status writes of progress counters alone
        go out (`controller.status_counts`); None writes every status at once."""
        self._placement_mode = placement_mode
        self._pods = pods
        self._enqueue = enqueue
        self._defer_children = defer_children
        self._early_job_conditions = early_job_conditions
        self._failed_pods = failed_pods
        # Every whole-JobSet restart's phases (`restart_timeline`); metrics registered by the
        # manager's registry, or a private one (tests, tools) when none is given.
        self.restarts = RestartTimeline(restart_metrics or RestartMetrics(None))
        self.expectations = CreateExpectations(
            lambda namespace, name: f"{namespace}/{name}" in self.jobs.store, enqueue, clock=clock
        )
        self.jobsets, self.jobs, self.services, self.pvcs = build_informers(
            client, enqueue, clock=clock, rng=rng, job_seen=self.expectations.observed
        )
        self._scheduling_api = scheduling_api
        # Jobs, Workloads, PodGroups deleted by a pass, not yet shown Terminating by the cache.
        self.deletions = DeleteExpectations(clock or RealClock())
        self.scheduling: tuple[Informer, Informer] | None = None
        if features.workload_aware_scheduling and scheduling_api:
            self.scheduling = build_scheduling_informers(client, enqueue, clock=clock, rng=rng)
        self._executor = executor
        self._recorder = recorder
        self._features = features
        self._now = now
        self._progress_counts = progress_counts
        self._written: dict[str, int] = {}  # key -> resourceVersion of our last status write
        self.stale_skips = 0
        self.expectation_skips = 0

    @property
    def informers(self) -> tuple[Informer, ...]:
        own = (self.jobsets, self.jobs, self.services, self.pvcs)
        return own if self.scheduling is None else (*own, *self.scheduling)

    def _snapshot(self, raw: dict[str, Any], uid: str) -> Snapshot | str:
        """The inputs of one pass around the cached JobSet `raw` (whose UID is `uid`), or why it
        cannot be parsed.

        The models (and pydantic) are reached through the `api` package at the first pass, not
        imported with this module: they are not on the path from process start to /readyz."""
        from pydantic import ValidationError

        try:
            jobset = api.JobSet.model_validate(raw)
        except ValidationError as error:
            return invalid_jobset_message(error.errors()[0]["msg"])
        namespace = str(raw["metadata"]["namespace"])
        service = self.services.store.get(f"{namespace}/{jobset_subdomain(jobset)}")
        claims = self.pvcs.store.by_index("namespace", namespace)
        view = self.deletions.view
        jobs = tuple(view(job) for job in self.jobs.store.by_index(OWNER_UID, uid))
        return Snapshot(
            jobset=jobset,
            jobs=jobs,
            service=service,
            now=self._now(),
            features=self._features,
            existing_pvcs=frozenset(c["metadata"]["name"] for c in claims),
            pod_webhooks=self._pod_webhooks(),
            defer_children=self._defer_children,
            early_job_conditions=self._early_job_conditions,
            failed_pods=self._failed_of(raw, jobs),
            pods=self._pods_of(raw),
            scheduling_api=self._scheduling_api,
            workload=self._workload_of(uid),
            pod_groups=self._pod_groups_of(uid),
        )

    def _workload_of(self, uid: str) -> Mapping[str, Any] | None:
        if self.scheduling is None:
            return None
        workload = next(iter(self.scheduling[0].store.by_index(OWNER_UID, uid)), None)
        return None if workload is None else self.deletions.view(workload)

    def _pod_groups_of(self, uid: str) -> tuple[Mapping[str, Any], ...]:
        if self.scheduling is None:
            return ()
        view = self.deletions.view
        return tuple(view(group) for group in self.scheduling[1].store.by_index(OWNER_UID, uid))

    def _pods_of(self, raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
        if self._pods is None or not _uses_in_place_restart(raw):
            return ()
        metadata = raw["metadata"]
        key = f"{metadata['namespace']}/{metadata['name']}"
        return tuple(self._pods.store.by_index(JOBSET_PODS, key))

    def _failed_of(
        self, raw: Mapping[str, Any], jobs: tuple[Mapping[str, Any], ...]
    ) -> tuple[Mapping[str, Any], ...]:
        """The JobSet's failed pods, for a pass that sees a failed Job (its messages name the
        first failure); other passes are not given them."""
        if self._failed_pods is None or not _has_failed_job(jobs):
            return ()
        metadata = raw["metadata"]
        return self._failed_pods(str(metadata["namespace"]), str(metadata["name"]))

    def pod_changed(self, key: str) -> None:
        """A pod of the JobSet `key` changed what the in-place pass reads: wake the JobSet if
        it uses the InPlaceRestart strategy (others never read their pods)."""
        raw = self.jobsets.store.get(key)
        if raw is not None and _uses_in_place_restart(raw):
            self._enqueue(key)

    def _pod_webhooks(self) -> bool:
        return self._placement_mode is not None and self._placement_mode.pod_webhooks()

    async def _plan(self, snapshot: Snapshot) -> Plan:
        """The pass's plan, built from a mode no older than `PROBE_PERIOD` if it creates Jobs
        that depend on the mode (module docstring)."""
        plan = reconcile.reconcile(snapshot)
        mode = self._placement_mode
        if mode is None or mode.is_fresh() or not creates_mode_dependent_jobs(plan):
            return plan
        pod_webhooks = await mode.fresh()
        if pod_webhooks == snapshot.pod_webhooks:
            return plan  # same mode: the same snapshot gives the same plan
        return reconcile.reconcile(dataclasses.replace(snapshot, pod_webhooks=pod_webhooks))

    def _follow_restart(
        self, key: str, raw: Mapping[str, Any], snapshot: Snapshot, plan: Plan
    ) -> None:
        """After a pass whose writes all succeeded: the restart timeline moves on; a restart
        that ended gets its RestartCompleted Event."""
        completed = self.restarts.passed(key, snapshot, plan)
        if completed is not None:
            log.info("restart completed", timeline=completed.note)
            self._recorder.record(
                ObjectRef.from_object(raw), NORMAL, RESTART_COMPLETED_EVENT, completed.note
            )

    def _cache_is_behind_our_write(self, key: str, raw: dict[str, Any]) -> bool:
        written = self._written.get(key)
        if written is None:
            return False
        cached = str(raw["metadata"].get("resourceVersion", ""))
        if cached.isdigit() and int(cached) < written:
            self.stale_skips += 1
            return True
        del self._written[key]  # caught up (or not comparable): forget it
        return False

    async def reconcile(self, key: str) -> Result | None:
        raw = self.jobsets.store.get(key)
        if raw is None:
            self._written.pop(key, None)
            if self._progress_counts is not None:
                self._progress_counts.forget(key)
            self.expectations.forget(key)
            self.restarts.forget(key)
            return None  # deleted: the garbage collector removes the children
        if self._cache_is_behind_our_write(key, raw):
            return None
        uid = str(raw["metadata"].get("uid", ""))
        if self.expectations.pending(key, uid):
            self.expectation_skips += 1
            return None  # the event of the last unseen Job enqueues the key again
        snapshot = self._snapshot(raw, uid)
        if isinstance(snapshot, str):
            message = snapshot
            log.warning("unreadable jobset", error=message)
            self._recorder.record(
                ObjectRef.from_object(raw), WARNING, INVALID_JOBSET_EVENT, message
            )
            return None
        decided = await self._plan(snapshot)
        plan, counts_due = decided, None
        if self._progress_counts is not None:
            plan, counts_due = self._progress_counts.hold(key, raw.get("status"), decided)
        if not plan.is_empty():
            names = plan.names_to_create()
            self.expectations.expect(key, uid, names)
            self.deletions.deleted(
                (
                    *(delete.uid for delete in plan.jobs_to_delete),
                    *(write.uid for write in plan.scheduling_to_delete),
                ),
                format_time(snapshot.now),
            )
            created: set[str] = set()
            try:
                written = await self._executor.execute(raw, plan, on_created=created.add)
            except Conflict:
                # The status write or a Job patch met a newer version than the snapshot's.
                log.info("a write conflicted; reconciling again from fresh state")
                raise
            finally:
                # A Job this pass did not create (AlreadyExists: it may be one the Job cache
                # never holds; a failed create; a create never sent) is nothing to wait for.
                for name in names:
                    if name not in created:
                        self.expectations.observed(key, name)
            if written is not None and written.isdigit():
                self._written[key] = int(written)
            if plan.status is not None and written is None:
                self.restarts.forget(key)  # deleted while this pass ran
                return None
        # The timeline follows the Jobs as the pass saw them, held counters included.
        self._follow_restart(key, raw, snapshot, decided)
        due = [t for t in (plan.requeue_after, counts_due) if t is not None]
        return Result(requeue_after=min(due)) if due else None
