"""Which missing child Jobs to create this pass (docs/behaviour.md#job-creation).

Walk the replicatedJobs in spec order:

1. skip one whose dependsOn is not reached (even while suspended; later ones may still start);
2. running with InOrder: skip one whose Jobs have all started;
3. create each Job whose name no child Job has, in any bucket. That is the Recreate strategy: a
   Job of the old attempt is recreated once its own predecessor has disappeared. With
   BlockingRecreate nothing is created while any previous Job still exists;
4. running with InOrder: mark StartupPolicyInProgress and stop here until this one has started.

After the walk, InOrder marks StartupPolicyCompleted (which flips InProgress to False).

At most ``MAX_JOB_CREATES_PER_PASS`` manifests are planned in one pass, so a huge JobSet does not
build thousands of manifests in one go on the event loop. The creates' own watch events
trigger the next pass, which continues where this one stopped; ``truncated`` lets the caller
requeue as insurance.
"""

from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api import RestartStrategy
from jobset_controller.api.naming import job_name
from jobset_controller.reconcile.depends_on import dependencies_are_reached
from jobset_controller.reconcile.desired_jobs import construct_job
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.execution_attempts import annotation_value
from jobset_controller.reconcile.startup_order import (
    COMPLETED,
    IN_PROGRESS,
    all_replicas_started,
    starts_in_order,
)
from jobset_controller.reconcile.view import JobSetView

# Small enough that one pass cannot stall the loop building manifests (~14 ms for 1000 on the
# development machine, within the 10-30 ms an informer's list slice takes), large enough that a
# big JobSet needs few passes: each pass re-reads every cached child of its JobSet, so passes,
# not manifests, were the cost. 500 (the Job controller's bound on pod creates per sync) made a
# 1000-Job JobSet take 4-9 passes and ~0.47 s of CPU; 1000 takes 2-3 passes and ~0.39 s
# (hack/bench/cpu_bench.py; docs/benchmarks.md, "History", round 5).
MAX_JOB_CREATES_PER_PASS: Final = 1000


@dataclass(frozen=True)
class Creation:
    """The Jobs to create, the draft with startup conditions, and whether the bound cut it."""

    jobs: tuple[dict[str, Any], ...]
    draft: StatusDraft
    truncated: bool = False


def recreation_is_blocked(view: JobSetView) -> bool:
    """BlockingRecreate and a Job of an earlier attempt still exists."""
    policy = view.jobset.spec.failure_policy
    blocking = policy is not None and policy.restart_strategy == RestartStrategy.BLOCKING_RECREATE
    return blocking and bool(view.children.previous)


def plan_job_creation(view: JobSetView, draft: StatusDraft) -> Creation:
    """The missing Jobs to create, in spec and index order, and the startup conditions."""
    js = view.jobset
    in_order = not view.suspended and starts_in_order(js)
    blocked = recreation_is_blocked(view)
    taken = view.children.names()
    name = js.metadata.name or ""
    execution_attempt = annotation_value(view, draft)
    jobs: list[dict[str, Any]] = []
    for rjob in js.spec.replicated_jobs:
        if not dependencies_are_reached(rjob, view.replicas, view.counts):
            continue
        if in_order and all_replicas_started(rjob.replicas, view.counts[rjob.name]):
            continue
        template = rjob.template.to_dict()
        for job_index in range(0 if blocked else rjob.replicas):
            if job_name(name, rjob.name, job_index) in taken:
                continue
            if len(jobs) == MAX_JOB_CREATES_PER_PASS:
                # InOrder never gets past the replicatedJob being created, so it is in progress.
                draft = draft.with_condition(IN_PROGRESS) if in_order else draft
                return Creation(tuple(jobs), draft, truncated=True)
            attempt = None
            if view.features.restart_job:
                attempt = draft.job_restarts_of(rjob.name).at(job_index)
            jobs.append(
                construct_job(
                    js,
                    rjob,
                    job_index,
                    restarts=draft.restarts,
                    job_restart_attempt=attempt,
                    pod_webhooks=view.pod_webhooks,
                    template=template,
                    execution_attempt=execution_attempt,
                )
            )
        if in_order:
            return Creation(tuple(jobs), draft.with_condition(IN_PROGRESS))
    if in_order:
        draft = draft.with_condition(COMPLETED)
    return Creation(tuple(jobs), draft)
