"""One reconcile pass, one helper per step: the one statement of the order of a pass.

What the order means for a JobSet is docs/behaviour.md#reconcile-order; each step's module says
how it decides.

    1. being deleted                 -> empty Plan (garbage collection does the rest)
    2. managed by another controller -> empty Plan (``managed_by``)
    3. default in memory; sort the child Jobs (``classify``; an unreadable one -> Warning event
       only)
    4. count the current attempt's Jobs into the status draft (``counts``, ``draft``)
    5. finished (Completed/Failed)   -> delete active Jobs, apply the TTL (``ttl``); stop
    6. rejected (invalid JobSet, InPlaceRestart with its gate off, no replicatedJobs) -> Failed
       (``rejection``)
    7. delete the previous attempt's Jobs; count the execution attempt (``execution_attempts``,
       its gate)
    8. all Jobs ready                -> RestartingJobSet=False (JobsReady)
    9. JobSetActiveDeadlineSeconds gate: ``startTime`` set to now when running without one,
       removed while suspended (``active_deadline``)
   10. active deadline passed        -> Completed when the success policy is met, else Failed
       (DeadlineExceeded) with the active Jobs deleted in the same Plan; stop. The failure
       policy is not consulted: an expired JobSet is never restarted.
   11. any failed Job                -> failure policy (``failure_policy``); stop
   12. enough succeeded Jobs         -> Completed (``success_policy``, ``terminal``); stop
   13. headless Service (``service``); 14. PVCs (``volumes``); 15. elastic sizes (``elastic``);
       16. missing Jobs (``job_creation``, ``depends_on``, ``startup_order``); 17. suspend or
       resume (``suspend``). Deferred children (``deferred``): a suspended JobSet that never ran
       gets only 14 and its status. Gang scheduling (``scheduling``): 16 and 17 wait while an
       old PodGroup of the JobSet is Terminating, and a resume deletes the suspended Jobs linked
       to a PodGroup the spec no longer gives them
   18. InPlaceRestart strategy with its gate: the in-place barrier's status fields
       (``in_place_restart``), or Failed ReachedMaxRestarts
   19. the status, when it changed, with its events (``status``)

Failure wins over success within a pass: a pass that sees a failed Job never completes the
JobSet. Only a passed deadline comes between them (success, then the deadline, then failure).
While a deadline runs, every Plan of a running JobSet after step 10 asks to be requeued when it
passes at the latest (a hung JobSet's Jobs send no events). The steps after 12 all contribute to
one Plan; when two of them patch the same Job (elastic and resume), their patches are merged
into one.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jobset_controller.api import ConditionType, FieldError, default_jobset
from jobset_controller.reconcile.active_deadline import (
    Deadline,
    deadline_of,
    fail_for_deadline,
    keep_start_time,
    wake_for_deadline,
)
from jobset_controller.reconcile.catalogue import (
    INVALID_CHILD_JOB_EVENT,
    JOBS_READY_MESSAGE,
    JOBS_READY_REASON,
    NO_REPLICATED_JOBS_MESSAGE,
    VALIDATION_FAILED_REASON,
    WARNING,
)
from jobset_controller.reconcile.classify import InvalidChild, classify_jobs
from jobset_controller.reconcile.conditions import NewCondition, is_true
from jobset_controller.reconcile.counts import count_replicated_jobs, counts_by_name
from jobset_controller.reconcile.deferred import children_are_deferred, deferred_counts
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.elastic import elastic_patches
from jobset_controller.reconcile.execution_attempts import count_resume, start_counting
from jobset_controller.reconcile.failure_policy import Blocked, execute_failure_policy
from jobset_controller.reconcile.gang import (
    ResumeHold,
    SchedulingOutcome,
    link_jobs,
    plan_scheduling,
    resume_hold,
    stale_links,
)
from jobset_controller.reconcile.in_place_restart import (
    InPlaceOutcome,
    reconcile_in_place_restart,
    uses_in_place_restart,
)
from jobset_controller.reconcile.job_creation import plan_job_creation
from jobset_controller.reconcile.jobs import Job, is_being_deleted, name_of, resource_version_of
from jobset_controller.reconcile.jobs import uid_of as job_uid
from jobset_controller.reconcile.managed_by import is_managed_by_this_controller
from jobset_controller.reconcile.plan import Event, JobDelete, JobPatch, Plan
from jobset_controller.reconcile.rejection import find_rejection, validation_message
from jobset_controller.reconcile.service import service_to_create
from jobset_controller.reconcile.snapshot import Snapshot
from jobset_controller.reconcile.status import render_status, same_status
from jobset_controller.reconcile.success_policy import success_policy_is_met
from jobset_controller.reconcile.suspend import plan_resume, plan_suspend
from jobset_controller.reconcile.terminal import complete_jobset, fail_jobset, is_finished
from jobset_controller.reconcile.timestamps import format_time
from jobset_controller.reconcile.ttl import ttl_outcome
from jobset_controller.reconcile.view import JobSetView
from jobset_controller.reconcile.volumes import pvc_manifests

# Deletes per pass, bounded like creates (job_creation.MAX_JOB_CREATES_PER_PASS) so one pass's
# writes stay bounded (the executor sends them 50 at a time); each delete's watch event
# triggers the pass that continues.
MAX_JOB_DELETES_PER_PASS: Final = 1000
# Requeue insurance when a bound cut a pass short.
CONTINUE_AFTER_SECONDS: Final = 1.0

# The Failed message of a JobSet without replicatedJobs, worded like the other validation failures.
NOTHING_TO_RUN: Final = validation_message(
    [FieldError("spec.replicatedJobs", "Required", NO_REPLICATED_JOBS_MESSAGE)]
)

JOBS_READY = NewCondition(
    ConditionType.RESTARTING_JOBSET, False, JOBS_READY_REASON, JOBS_READY_MESSAGE
)


def reconcile(snapshot: Snapshot) -> Plan:
    """The Plan that moves the JobSet of ``snapshot`` one step towards its spec."""
    cached = snapshot.jobset
    if cached.metadata.deletion_timestamp:
        return Plan()
    if not is_managed_by_this_controller(cached):
        return Plan()
    view = _view(snapshot)
    if isinstance(view, InvalidChild):
        return Plan(events=(Event(WARNING, INVALID_CHILD_JOB_EVENT, view.note(), False),))
    js = view.jobset
    draft = StatusDraft.start(
        js.status,
        tuple(view.counts.values()),
        now=format_time(snapshot.now),
        carry_job_restarts=snapshot.features.restart_job,
        track_execution_attempts=snapshot.features.execution_attempts_tracking,
        track_start_time=snapshot.features.active_deadline_seconds,
    )
    if is_finished(draft.conditions):
        return _finished(snapshot, view, draft)
    rejection = find_rejection(js, snapshot.features, realised=_realised(snapshot))
    if rejection is not None:
        return _plan(snapshot, fail_jobset(draft, rejection.reason, rejection.message))
    if not js.spec.replicated_jobs:
        # The CRD admits it (empty, null or no spec), but nothing can ever run: replicatedJobs
        # are immutable. Failing says why once; the finished JobSet is not judged again.
        return _plan(snapshot, fail_jobset(draft, VALIDATION_FAILED_REASON, NOTHING_TO_RUN))
    deletes, deletes_cut = _deletes(view.children.previous)
    draft = start_counting(view, draft)
    draft = _mark_jobs_ready(view, draft)
    draft = keep_start_time(view, draft)
    deadline = deadline_of(view, draft)
    if deadline.expired:
        return _deadline_passed(snapshot, view, draft, deadline, deletes)
    if view.children.failed:
        outcome = execute_failure_policy(
            js.spec.failure_policy,
            view.children.failed,
            draft,
            replicas=view.replicas,
            restart_job_gate=snapshot.features.restart_job,
            failed_pods=snapshot.failed_pods,
        )
        if isinstance(outcome, Blocked):
            return Plan(
                jobs_to_delete=deletes,
                events=(outcome.event(),),
                requeue_after=wake_for_deadline(view, draft),
            )
        return _plan(
            snapshot,
            outcome,
            jobs_to_delete=deletes,
            requeue_after=wake_for_deadline(view, outcome),
        )
    if _success_is_met(view):
        return _plan(snapshot, complete_jobset(draft), jobs_to_delete=deletes)
    return _run(snapshot, view, draft, deletes, deletes_cut)


def _view(snapshot: Snapshot) -> JobSetView | InvalidChild:
    js = default_jobset(snapshot.jobset)
    features = snapshot.features
    replicas = {rjob.name: rjob.replicas for rjob in js.spec.replicated_jobs}
    job_restarts = (
        {entry.name: entry.job_restarts for entry in js.status.replicated_jobs_status}
        if features.restart_job
        else None
    )
    children = classify_jobs(
        snapshot.jobs,
        restarts=js.status.restarts,
        replicas=replicas,
        job_restarts=job_restarts,
        early=snapshot.early_job_conditions,
    )
    if isinstance(children, InvalidChild):
        return children
    counts = count_replicated_jobs(list(replicas), children)
    return JobSetView(
        js,
        children,
        counts_by_name(counts),
        replicas,
        features,
        snapshot.now,
        pod_webhooks=snapshot.pod_webhooks,
    )


def _finished(snapshot: Snapshot, view: JobSetView, draft: StatusDraft) -> Plan:
    """Step 5: a finished JobSet only loses its active Jobs and waits for its TTL."""
    deletes, cut = _deletes(view.children.active)
    ttl = ttl_outcome(view.jobset.spec.ttl_seconds_after_finished, draft.conditions, snapshot.now)
    requeue = ttl.requeue_after
    if cut:
        requeue = min(requeue or CONTINUE_AFTER_SECONDS, CONTINUE_AFTER_SECONDS)
    return _plan(
        snapshot,
        draft,
        jobs_to_delete=deletes,
        requeue_after=requeue,
        delete_jobset=ttl.delete_jobset,
    )


def _success_is_met(view: JobSetView) -> bool:
    """Steps 10 and 12: the success policy is met by the current attempt's succeeded Jobs."""
    js = view.jobset
    return bool(view.children.succeeded) and success_policy_is_met(
        js.spec.success_policy, js.spec.replicated_jobs, view.children.succeeded
    )


def _deadline_passed(
    snapshot: Snapshot,
    view: JobSetView,
    draft: StatusDraft,
    deadline: Deadline,
    deletes: tuple[JobDelete, ...],
) -> Plan:
    """Step 10: the active deadline passed. A met success policy still completes the JobSet;
    otherwise it fails, and the same Plan deletes its active Jobs (after the previous attempt's,
    within the bound of a pass: the finished JobSet's next pass deletes what is left)."""
    if _success_is_met(view):
        return _plan(snapshot, complete_jobset(draft), jobs_to_delete=deletes)
    active, cut = _deletes(view.children.active)
    room = MAX_JOB_DELETES_PER_PASS - len(deletes)
    return _plan(
        snapshot,
        fail_for_deadline(draft, deadline),
        jobs_to_delete=(*deletes, *active[:room]),
        requeue_after=CONTINUE_AFTER_SECONDS if cut or len(active) > room else None,
        deadline_exceeded=True,
    )


def _mark_jobs_ready(view: JobSetView, draft: StatusDraft) -> StatusDraft:
    """Step 8: every Job ready or succeeded ends a restart (only shows if one was recorded)."""
    if view.suspended:
        return draft
    ready = sum(counts.ready + counts.succeeded for counts in draft.replicated_jobs)
    if ready != sum(view.replicas.values()):
        return draft
    return draft.with_condition(JOBS_READY)


def _run(
    snapshot: Snapshot,
    view: JobSetView,
    draft: StatusDraft,
    deletes: tuple[JobDelete, ...],
    deletes_cut: bool,
) -> Plan:
    """Steps 13-18 of a running JobSet."""
    js = view.jobset
    if children_are_deferred(snapshot, view):
        # Suspended and never ran, with deferredChildren on: the status of suspended Jobs, but
        # no Jobs and no Service until the first resume (claims are still ensured).
        counted = dataclasses.replace(draft, replicated_jobs=deferred_counts(view))
        return _plan(
            snapshot,
            plan_suspend(view, counted).draft,
            pvcs_to_create=_missing(pvc_manifests(js), snapshot.existing_pvcs),
        )
    elastic = (
        elastic_patches(js.spec.replicated_jobs, view.children.active)
        if snapshot.features.elastic_job_set
        else {}
    )
    scheduling = plan_scheduling(snapshot, js, suspended=view.suspended)
    hold = None if view.suspended else resume_hold(snapshot, js, view.children.active)
    if hold is not None:
        return _held(snapshot, view, draft, deletes, deletes_cut, elastic, scheduling, hold)
    creation = plan_job_creation(view, count_resume(view, draft))
    relinked: tuple[Job, ...] = ()
    if view.suspended:
        suspension = plan_suspend(view, creation.draft)
    else:
        suspension = plan_resume(view, creation.draft)
        relinked = stale_links(snapshot, js, view.children.active, scheduling.groups)
    cut = deletes_cut or creation.truncated
    in_place = InPlaceOutcome(suspension.draft)
    if snapshot.features.in_place_restart and uses_in_place_restart(js):
        in_place = reconcile_in_place_restart(js, snapshot.pods, suspension.draft)
    # A Job linked to a PodGroup its spec no longer gives it is deleted instead of resumed; the
    # pass after it is gone creates it again, linked (scheduling.stale_links).
    stale = {name_of(job) for job in relinked}
    patches = _merged_patches(view.children.active, elastic, suspension.patches)
    return _plan(
        snapshot,
        in_place.draft,
        status_fields=in_place.status_fields,
        extra_events=(*(() if in_place.event is None else (in_place.event,)), *scheduling.events),
        scheduling=scheduling,
        jobs_to_create=link_jobs(creation.jobs, scheduling.groups),
        jobs_to_delete=(*deletes, *(JobDelete(name_of(job), job_uid(job)) for job in relinked)),
        jobs_to_patch=tuple(patch for patch in patches if patch.name not in stale),
        service_to_create=service_to_create(js, snapshot.service),
        pvcs_to_create=_missing(pvc_manifests(js), snapshot.existing_pvcs),
        requeue_after=wake_for_deadline(
            view, in_place.draft, CONTINUE_AFTER_SECONDS if cut else None
        ),
    )


def _held(
    snapshot: Snapshot,
    view: JobSetView,
    draft: StatusDraft,
    deletes: tuple[JobDelete, ...],
    deletes_cut: bool,
    elastic: Mapping[str, Mapping[str, Any]],
    scheduling: SchedulingOutcome,
    hold: ResumeHold,
) -> Plan:
    """Steps 13-17 while an old PodGroup of the JobSet is Terminating: no Job is created or
    resumed (its pods would name the old object and keep it Terminating while they run), nor
    is the resume counted or marked (the pass that resumes does both); the rest goes on."""
    js = view.jobset
    requeue = hold.requeue_after
    if deletes_cut:
        requeue = min(requeue, CONTINUE_AFTER_SECONDS)
    return _plan(
        snapshot,
        draft,
        extra_events=(*scheduling.events, *hold.events),
        scheduling=scheduling,
        jobs_to_delete=deletes,
        jobs_to_patch=_merged_patches(view.children.active, elastic, ()),
        service_to_create=service_to_create(js, snapshot.service),
        pvcs_to_create=_missing(pvc_manifests(js), snapshot.existing_pvcs),
        requeue_after=wake_for_deadline(view, draft, requeue),
    )


def _realised(snapshot: Snapshot) -> bool:
    """Whether this JobSet already has Jobs or a written status, i.e. was admitted and run."""
    status = snapshot.jobset.status
    return bool(snapshot.jobs) or (status is not None and bool(status.to_dict()))


def _missing(
    pvcs: tuple[dict[str, Any], ...], existing: frozenset[str] | None
) -> tuple[dict[str, Any], ...]:
    """The claims still to create: all of them when which exist is unknown (upstream's way)."""
    if existing is None:
        return pvcs
    return tuple(pvc for pvc in pvcs if pvc["metadata"]["name"] not in existing)


def _deletes(jobs: Sequence[Job]) -> tuple[tuple[JobDelete, ...], bool]:
    """Deletes of ``jobs`` not already being deleted, bounded; and whether the bound cut them."""
    pending = [job for job in jobs if not is_being_deleted(job)]
    bounded = pending[:MAX_JOB_DELETES_PER_PASS]
    deletes = tuple(JobDelete(name_of(job), job_uid(job)) for job in bounded)
    return deletes, len(pending) > len(bounded)


def _merged_patches(
    active: Sequence[Job],
    elastic: Mapping[str, Mapping[str, Any]],
    others: Sequence[JobPatch],
) -> tuple[JobPatch, ...]:
    """One patch per Job: the elastic patch merged with a suspend/resume patch of that Job."""
    jobs = {name_of(job): job for job in active}
    merged: dict[str, JobPatch] = {
        name: JobPatch(
            name,
            job_uid(jobs[name]),
            resource_version_of(jobs[name]),
            patch,
            reason="elastic",
        )
        for name, patch in elastic.items()
    }
    for patch in others:
        earlier = merged.get(patch.name)
        if earlier is None:
            merged[patch.name] = patch
            continue
        merged[patch.name] = JobPatch(
            patch.name,
            patch.uid,
            patch.resource_version,
            _merge(earlier.patch, patch.patch),
            clear_start_time=earlier.clear_start_time or patch.clear_start_time,
            reason=f"{earlier.reason}+{patch.reason}",
        )
    return tuple(merged.values())


def _merge(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(first)
    for key, value in second.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _plan(
    snapshot: Snapshot,
    draft: StatusDraft,
    *,
    jobs_to_create: tuple[Mapping[str, Any], ...] = (),
    jobs_to_delete: tuple[JobDelete, ...] = (),
    jobs_to_patch: tuple[JobPatch, ...] = (),
    service_to_create: Mapping[str, Any] | None = None,
    pvcs_to_create: tuple[Mapping[str, Any], ...] = (),
    requeue_after: float | None = None,
    delete_jobset: bool = False,
    status_fields: Mapping[str, Any] | None = None,
    extra_events: tuple[Event, ...] = (),
    scheduling: SchedulingOutcome | None = None,
    deadline_exceeded: bool = False,
) -> Plan:
    """Step 19: the Plan, with the status only when it changed (and then its events);
    ``status_fields`` are set over the rendered status, ``extra_events`` are emitted at once.
    ``deadline_exceeded``: the draft fails the JobSet for its active deadline (counted only by
    the write that makes it Failed)."""
    old = snapshot.jobset.to_dict().get("status") or {}
    new = render_status(old, draft, job_restarts_gate=snapshot.features.restart_job)
    new.update(status_fields or {})
    changed = not same_status(old, new)
    old_conditions = tuple(old.get("conditions") or ())
    failed = changed and _became(ConditionType.FAILED, old_conditions, draft)
    return Plan(
        jobs_to_create=jobs_to_create,
        jobs_to_delete=jobs_to_delete,
        jobs_to_patch=jobs_to_patch,
        service_to_create=service_to_create,
        pvcs_to_create=pvcs_to_create,
        status=new if changed else None,
        status_resource_version=snapshot.jobset.metadata.resource_version if changed else None,
        # Events are queued only by changes, so they never come without a status write; Plan
        # rejects that combination, which would be a bug here.
        events=(*draft.events, *extra_events),
        requeue_after=requeue_after,
        delete_jobset=delete_jobset,
        completed=changed and _became(ConditionType.COMPLETED, old_conditions, draft),
        failed=failed,
        deadline_exceeded=deadline_exceeded and failed,
        workload_to_create=None if scheduling is None else scheduling.workload_to_create,
        pod_groups_to_create=() if scheduling is None else scheduling.pod_groups_to_create,
        scheduling_to_patch=() if scheduling is None else scheduling.to_patch,
        scheduling_to_delete=() if scheduling is None else scheduling.to_delete,
        restart=draft.restart if changed else None,
    )


def _became(condition_type: str, old: Sequence[Mapping[str, Any]], draft: StatusDraft) -> bool:
    return draft.has_true_condition(condition_type) and not is_true(tuple(old), condition_type)
