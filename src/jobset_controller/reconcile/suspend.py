"""Suspend and resume (docs/behaviour.md#suspend), the way Kueue admits and preempts JobSets.

**Suspended JobSet**: every active Job not yet suspended gets ``suspend: true``; then
``Suspended=True`` (SuspendedJobs) and ``RestartingJobSet=False`` (JobSetSuspended).

**Running JobSet**: walk the replicatedJobs in spec order, skipping one whose dependsOn is not
reached and, with InOrder, one whose Jobs have all started. Resume each suspended active Job:

1. clear ``status.startTime`` first when set (the Job API refuses template changes on a Job that
   has started), which the executor does before the spec patch;
2. merge the replicatedJob's CURRENT pod template into the Job's, for the five fields Kueue may
   change while suspended: ``labels``, ``annotations`` and ``nodeSelector`` as maps (the template
   wins a conflict; keys only on the Job stay: removals are not propagated), ``tolerations`` and
   ``schedulingGates`` as a union (the Job's entries in their order, then the template's entries
   the Job lacks, in the template's order, so the patch is deterministic);
3. with the MutablePodResourcesForSuspendedJobSets gate, give each container and init container
   (matched by name) the template's ``resources.requests`` and ``limits`` (claims stay); the
   patch is then a strategic merge patch (``resource_changes``);
4. set ``suspend: false``.

With InOrder the walk stops after the first replicatedJob not yet started (StartupPolicyInProgress),
so the JobSet resumes one replicatedJob at a time. A walk that finishes sets ``Suspended=False``
(ResumeJobs), which only shows once a Suspended condition exists. Resuming never counts as a
restart (with ExecutionAttemptsTracking it starts a new execution attempt, whose number the
resume patch writes into the Job and its pod template: execution_attempts.py). Jobs being
deleted are left alone.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api import EXECUTION_ATTEMPT_KEY, REPLICATED_JOB_NAME_KEY, ConditionType
from jobset_controller.reconcile.catalogue import (
    JOBSET_SUSPENDED_MESSAGE,
    JOBSET_SUSPENDED_REASON,
    RESUME_JOBS_MESSAGE,
    RESUME_JOBS_REASON,
    SUSPENDED_JOBS_MESSAGE,
    SUSPENDED_JOBS_REASON,
)
from jobset_controller.reconcile.conditions import NewCondition
from jobset_controller.reconcile.depends_on import dependencies_are_reached
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.execution_attempts import annotation_value
from jobset_controller.reconcile.jobs import (
    Job,
    has_start_time,
    is_being_deleted,
    is_suspended,
    labels_of,
    name_of,
    pod_template_of,
    resource_version_of,
    uid_of,
)
from jobset_controller.reconcile.plan import JobPatch
from jobset_controller.reconcile.startup_order import (
    IN_PROGRESS,
    all_replicas_started,
    starts_in_order,
)
from jobset_controller.reconcile.view import JobSetView

SUSPENDED = NewCondition(
    ConditionType.SUSPENDED, True, SUSPENDED_JOBS_REASON, SUSPENDED_JOBS_MESSAGE
)
RESUMED = NewCondition(ConditionType.SUSPENDED, False, RESUME_JOBS_REASON, RESUME_JOBS_MESSAGE)
RESTART_OVER_SUSPENDED = NewCondition(
    ConditionType.RESTARTING_JOBSET, False, JOBSET_SUSPENDED_REASON, JOBSET_SUSPENDED_MESSAGE
)

# Pod template fields merged on resume: (section, field, how).
MERGED_FIELDS: Final = (
    ("metadata", "labels", "map"),
    ("metadata", "annotations", "map"),
    ("spec", "nodeSelector", "map"),
    ("spec", "tolerations", "union"),
    ("spec", "schedulingGates", "union"),
)


# MutablePodResourcesForSuspendedJobSets: the container lists of a pod spec, and the parts of a
# container's resources a resume carries from the template into the Job.
CONTAINER_LISTS: Final = ("containers", "initContainers")
RESOURCE_FIELDS: Final = ("requests", "limits")


@dataclass(frozen=True)
class SuspendOutcome:
    """The Job patches and the draft with the Suspended/startup conditions."""

    patches: tuple[JobPatch, ...]
    draft: StatusDraft


def plan_suspend(view: JobSetView, draft: StatusDraft) -> SuspendOutcome:
    """Suspend every running active Job; mark the JobSet suspended."""
    patches = tuple(
        JobPatch(
            name_of(job),
            uid_of(job),
            resource_version_of(job),
            {"spec": {"suspend": True}},
            reason="suspend",
        )
        for job in view.children.active
        if not is_suspended(job) and not is_being_deleted(job)
    )
    draft = draft.with_condition(SUSPENDED).with_condition(RESTART_OVER_SUSPENDED)
    return SuspendOutcome(patches, draft)


def plan_resume(view: JobSetView, draft: StatusDraft) -> SuspendOutcome:
    """Resume the suspended active Jobs that may run now; mark the JobSet resumed when done."""
    js = view.jobset
    in_order = starts_in_order(js)
    by_rjob: dict[str, list[Job]] = {}
    for job in view.children.active:
        by_rjob.setdefault(labels_of(job).get(REPLICATED_JOB_NAME_KEY, ""), []).append(job)
    patches: list[JobPatch] = []
    execution_attempt = annotation_value(view, draft)
    resources = view.features.mutable_pod_resources_for_suspended_job_sets
    for rjob in js.spec.replicated_jobs:
        if not dependencies_are_reached(rjob, view.replicas, view.counts):
            continue
        if in_order and all_replicas_started(rjob.replicas, view.counts[rjob.name]):
            continue
        template = rjob.template.spec.template.to_dict()
        patches.extend(
            resume_patch(job, template, execution_attempt=execution_attempt, resources=resources)
            for job in by_rjob.get(rjob.name, ())
            if is_suspended(job) and not is_being_deleted(job)
        )
        if in_order:
            return SuspendOutcome(tuple(patches), draft.with_condition(IN_PROGRESS))
    return SuspendOutcome(tuple(patches), draft.with_condition(RESUMED))


def resume_patch(
    job: Job,
    template: Mapping[str, Any],
    *,
    execution_attempt: str | None = None,
    resources: bool = False,
) -> JobPatch:
    """The patch that resumes ``job`` with the merged fields of the replicatedJob's pod template.

    Only merged fields that change are in the patch. Merged maps may be sent whole (a merge
    patch merges maps); merged lists must be (a merge patch replaces lists). With an
    ``execution_attempt`` (its gate), the Job and its pod template get that annotation in the
    same patch that resumes it. With ``resources`` (MutablePodResourcesForSuspendedJobSets) the
    template's container resources reach the Job's containers too (``resource_changes``).
    """
    job_template = pod_template_of(job)
    if execution_attempt is not None:
        template = _with_pod_annotation(template, EXECUTION_ATTEMPT_KEY, execution_attempt)
    template_patch: dict[str, dict[str, Any]] = {}
    for section, field, how in MERGED_FIELDS:
        current = _field(job_template, section, field)
        desired = _field(template, section, field)
        if how == "map":
            merged: Any = merge_maps(current, desired)
            unchanged = merged == dict(current or {})
        else:
            merged = union_lists(current, desired)
            unchanged = merged == list(current or [])
        if not unchanged:
            template_patch.setdefault(section, {})[field] = merged
    containers = resource_changes(job_template, template) if resources else {}
    if containers:
        template_patch.setdefault("spec", {}).update(containers)
    spec: dict[str, Any] = {"suspend": False}
    if template_patch:
        spec["template"] = template_patch
    body: dict[str, Any] = {"spec": spec}
    if execution_attempt is not None:
        body["metadata"] = {"annotations": {EXECUTION_ATTEMPT_KEY: execution_attempt}}
    return JobPatch(
        name_of(job),
        uid_of(job),
        resource_version_of(job),
        body,
        clear_start_time=has_start_time(job),
        reason="resume",
        strategic=bool(containers),
    )


def resource_changes(
    job_template: Mapping[str, Any], template: Mapping[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """The strategic-merge-patch entries that give the Job's containers and init containers the
    ``resources.requests``/``limits`` of the template's container of the same name (KEP-1150).

    Only containers whose requests or limits differ are named; each changed map is replaced
    whole (``$patch: replace``), so a request the template dropped goes too. ``claims`` are
    never touched, and a Job container without a template container of its name is left alone.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for key in CONTAINER_LISTS:
        wanted = {
            container.get("name"): container.get("resources") or {}
            for container in _field(template, "spec", key) or ()
            if isinstance(container, Mapping)
        }
        entries: list[dict[str, Any]] = []
        for container in _field(job_template, "spec", key) or ():
            if not isinstance(container, Mapping) or container.get("name") not in wanted:
                continue
            have = container.get("resources") or {}
            want = wanted[container.get("name")]
            changed = {
                field: {"$patch": "replace", **(want.get(field) or {})}
                for field in RESOURCE_FIELDS
                if (want.get(field) or {}) != (have.get(field) or {})
            }
            if changed:
                entries.append({"name": container["name"], "resources": changed})
        if entries:
            out[key] = entries
    return out


def merge_maps(
    current: Mapping[str, Any] | None, desired: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``current`` updated with ``desired``: desired wins a conflict, nothing is removed."""
    return {**(current or {}), **(desired or {})}


def union_lists(current: Sequence[Any] | None, desired: Sequence[Any] | None) -> list[Any]:
    """``current`` in its order, then each entry of ``desired`` it does not already hold."""
    out = list(current or [])
    for entry in desired or []:
        if entry not in out:
            out.append(entry)
    return out


def _with_pod_annotation(template: Mapping[str, Any], key: str, value: str) -> dict[str, Any]:
    """``template`` with one more pod annotation (a shallow copy: the model's dict is shared)."""
    metadata = dict(template.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), key: value}
    return {**template, "metadata": metadata}


def _field(template: Mapping[str, Any], section: str, field: str) -> Any:
    part = template.get(section)
    return part.get(field) if isinstance(part, Mapping) else None
