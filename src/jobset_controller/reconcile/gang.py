"""Gang scheduling (KEP-969, gate JobSetWorkloadAwareSchedulingAPI): the Workload, PodGroups and
pod links a pass wants, decided from the snapshot (docs/behaviour.md#gang-scheduling).

- Gate off, or no ``spec.scheduling``: nothing, ever (no Workload, no PodGroup, Jobs unchanged).
- The API server does not serve scheduling.k8s.io/v1beta1 (``Snapshot.scheduling_api`` False):
  one Warning event, no writes; the Jobs are built as without scheduling.
- Suspended: the Workload and PodGroups the snapshot holds are deleted (nothing reserves
  resources for a suspended JobSet); a resume recreates them under the same names. Jobs created
  while suspended (Kueue's queued JobSets) are linked all the same, to the PodGroups the resume
  creates.
- A resume is held (``resume_hold``) while a PodGroup of the JobSet is still Terminating and no
  running Job's pods name it: Kubernetes 1.37's podgroup-protection finalizer keeps the old
  object until its pods are gone, and pods created meanwhile would name it and keep it
  Terminating for as long as they run. The PodGroup's delete event wakes the JobSet; a requeue
  looks again, and a long wait is said in a ``ResumeWaitsForPodGroup`` event.
- On resume, suspended Jobs whose pods name another PodGroup than the current spec gives them
  (``spec.scheduling`` regrouped while suspended) are deleted, to be created again linked
  (``stale_links``): a suspended Job's pod template cannot change its ``schedulingGroup``, and
  its pods would wait for a PodGroup that is never created again.
- Otherwise: the Workload (owned by the JobSet, one PodGroupTemplate per group) and each PodGroup
  are created when missing; a computed Gang ``minCount`` that no longer matches the pods the group
  represents (ElasticJobSet) is merge-patched on both; every new Job carries the template's name
  in ``scheduling.k8s.io/group-template-name`` and its pods name their PodGroup in
  ``spec.schedulingGroup.podGroupName``.
- While kube-scheduler reports a PodGroup unschedulable (condition ``PodGroupInitiallyScheduled``
  False, reason ``Unschedulable``), each pass emits a ``PodGroupUnschedulable`` Warning event on
  the JobSet carrying the scheduler's message: a gang that does not fit binds no pod, so without
  it nothing on the JobSet says why it waits. The recorder folds identical notes into one Event's
  series, so each distinct message shows once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api import JobSet
from jobset_controller.api.constants import JOB_INDEX_KEY, REPLICATED_JOB_NAME_KEY
from jobset_controller.api.gang import (
    GROUP_TEMPLATE_ANNOTATION,
    SCHEDULING_API_VERSION,
    SchedulingGroup,
    group_of,
    scheduling_groups,
    workload_name,
)
from jobset_controller.reconcile.catalogue import (
    POD_GROUP_UNSCHEDULABLE_EVENT,
    RESUME_WAITS_FOR_POD_GROUP_EVENT,
    WARNING,
    WORKLOAD_API_UNAVAILABLE_EVENT,
    WORKLOAD_API_UNAVAILABLE_MESSAGE,
    pod_group_unschedulable_message,
    resume_waits_for_pod_group_message,
)
from jobset_controller.reconcile.jobs import (
    Job,
    is_being_deleted,
    is_suspended,
    labels_of,
    pod_template_of,
)
from jobset_controller.reconcile.ownership import controller_reference
from jobset_controller.reconcile.plan import Event, SchedulingWrite
from jobset_controller.reconcile.snapshot import Snapshot
from jobset_controller.reconcile.timestamps import format_time, parse_time

# A held resume says so once it has waited this long: the old pods end within their grace period
# (30 s by default) and the finalizer goes with the last of them, so a shorter wait is the normal
# course of a quick resume and not worth an event.
LONG_RESUME_WAIT_SECONDS: Final = 60.0
# How often a held resume looks again without a watch event. Insurance only: the PodGroup's own
# delete event wakes the JobSet at once.
RESUME_RECHECK_SECONDS: Final = 5.0


@dataclass(frozen=True)
class SchedulingOutcome:
    """The gang-scheduling part of a Plan (all empty when scheduling is not in force)."""

    groups: tuple[SchedulingGroup, ...] = ()
    workload_to_create: Mapping[str, Any] | None = None
    pod_groups_to_create: tuple[Mapping[str, Any], ...] = ()
    to_patch: tuple[SchedulingWrite, ...] = ()
    to_delete: tuple[SchedulingWrite, ...] = ()
    events: tuple[Event, ...] = ()


def plan_scheduling(snapshot: Snapshot, js: JobSet, *, suspended: bool) -> SchedulingOutcome:
    """The Workload/PodGroup writes of this pass, and the groups the new Jobs link to."""
    if not snapshot.features.workload_aware_scheduling or js.spec.scheduling is None:
        return SchedulingOutcome()
    if not snapshot.scheduling_api:
        if suspended:
            return SchedulingOutcome()
        event = Event(
            WARNING, WORKLOAD_API_UNAVAILABLE_EVENT, WORKLOAD_API_UNAVAILABLE_MESSAGE, False
        )
        return SchedulingOutcome(events=(event,))
    groups = scheduling_groups(js)
    if suspended:
        # The groups still link the Jobs this pass creates suspended (a JobSet queued by Kueue
        # gets its Jobs before it is admitted): a Job's pod schedulingGroup cannot be added on
        # resume (not among the template fields a suspended Job may change), so a Job created
        # unlinked would run its pods outside the gang for good.
        return SchedulingOutcome(groups=groups, to_delete=_deletes(snapshot))
    existing = {_name(group): group for group in snapshot.pod_groups}
    workload = workload_manifest(js, groups)
    to_create = tuple(
        pod_group_manifest(js, group) for group in groups if group.pod_group_name not in existing
    )
    patches = [
        SchedulingWrite("PodGroup", group.pod_group_name, patch=_min_count_patch(group.min_count))
        for group in groups
        if group.pod_group_name in existing
        and _stale_min_count(group, _policy(existing[group.pod_group_name].get("spec")))
    ]
    if snapshot.workload is not None:
        patch = _workload_patch(snapshot.workload, groups)
        if patch is not None:
            patches.insert(0, SchedulingWrite("Workload", workload_name(js), patch=patch))
    return SchedulingOutcome(
        groups=groups,
        workload_to_create=workload if snapshot.workload is None else None,
        pod_groups_to_create=to_create,
        to_patch=tuple(patches),
        events=unschedulable_events(snapshot.pod_groups),
    )


@dataclass(frozen=True)
class ResumeHold:
    """A resume held while PodGroups of the JobSet are still Terminating: their names, when to
    look again, and the event of a long wait."""

    pod_groups: tuple[str, ...]
    requeue_after: float
    events: tuple[Event, ...] = ()


def resume_hold(snapshot: Snapshot, js: JobSet, active: Sequence[Job]) -> ResumeHold | None:
    """The hold of a running JobSet's pass while one of its PodGroups is Terminating, or None.

    A PodGroup that running (unsuspended) Jobs' pods name does not hold anything: it was deleted
    under a running gang (by hand, say) and goes only when those pods end, so waiting for it
    would stop the JobSet from replacing a lost Job for as long as it runs."""
    if not _in_force(snapshot, js):
        return None
    terminating = [group for group in snapshot.pod_groups if _terminating(group)]
    if not terminating:
        return None  # every steady pass: the Jobs are not read
    running = {
        pod_group_of(job) for job in active if not is_suspended(job) and not is_being_deleted(job)
    }
    waiting = [group for group in terminating if _name(group) not in running]
    if not waiting:
        return None
    names = tuple(sorted(_name(group) for group in waiting))
    deleted_at = [
        parse_time((group.get("metadata") or {}).get("deletionTimestamp")) for group in waiting
    ]
    since = min((moment for moment in deleted_at if moment is not None), default=None)
    waited = 0.0 if since is None else max(0.0, (snapshot.now - since).total_seconds())
    if since is None or waited < LONG_RESUME_WAIT_SECONDS:
        recheck = min(RESUME_RECHECK_SECONDS, LONG_RESUME_WAIT_SECONDS - waited)
        return ResumeHold(names, requeue_after=max(recheck, 0.0))
    note = resume_waits_for_pod_group_message(", ".join(names), format_time(since))
    event = Event(WARNING, RESUME_WAITS_FOR_POD_GROUP_EVENT, note, False)
    return ResumeHold(names, requeue_after=RESUME_RECHECK_SECONDS, events=(event,))


def stale_links(
    snapshot: Snapshot, js: JobSet, active: Sequence[Job], groups: tuple[SchedulingGroup, ...]
) -> tuple[Job, ...]:
    """The suspended Jobs whose pods name another PodGroup than a Job created now would name.

    ``groups`` are the ones the new Jobs link to (``SchedulingOutcome.groups``); a ReplicatedJob
    without a group keeps its template's own ``schedulingGroup`` (none, unless the user set it
    without ``spec.scheduling``). Only with the gate on and the API served: otherwise links are
    never written, and never judged. A Job of a ReplicatedJob the spec does not name is left to
    the rest of reconcile."""
    if not snapshot.features.workload_aware_scheduling or not snapshot.scheduling_api:
        return ()
    rjobs = {rjob.name: rjob for rjob in js.spec.replicated_jobs}
    own: dict[str, str | None] = {}
    stale = []
    for job in active:
        if not is_suspended(job) or is_being_deleted(job):
            continue
        labels = labels_of(job)
        rjob = str(labels.get(REPLICATED_JOB_NAME_KEY, ""))
        if rjob not in rjobs:
            continue
        group = group_of(groups, rjob, int(labels.get(JOB_INDEX_KEY, "0") or 0))
        wanted: str | None
        if group is not None:
            wanted = group.pod_group_name
        else:
            if rjob not in own:
                own[rjob] = _link_of(rjobs[rjob].template.spec.template.to_dict())
            wanted = own[rjob]
        if pod_group_of(job) != wanted:
            stale.append(job)
    return tuple(stale)


def pod_group_of(job: Job) -> str | None:
    """The PodGroup a Job's pods name (``spec.template.spec.schedulingGroup.podGroupName``)."""
    return _link_of(pod_template_of(job))


def _link_of(pod_template: Mapping[str, Any]) -> str | None:
    spec = pod_template.get("spec")
    link = spec.get("schedulingGroup") if isinstance(spec, Mapping) else None
    name = link.get("podGroupName") if isinstance(link, Mapping) else None
    return str(name) if name else None


def _in_force(snapshot: Snapshot, js: JobSet) -> bool:
    return (
        snapshot.features.workload_aware_scheduling
        and js.spec.scheduling is not None
        and snapshot.scheduling_api
    )


# kube-scheduler's condition on a PodGroup and its reason for a gang that cannot be placed
# (k8s.io/api scheduling/v1beta1: PodGroupInitiallyScheduled, PodGroupReasonUnschedulable).
POD_GROUP_SCHEDULED_CONDITION = "PodGroupInitiallyScheduled"
POD_GROUP_UNSCHEDULABLE_REASON = "Unschedulable"


def unschedulable_events(pod_groups: Sequence[Mapping[str, Any]]) -> tuple[Event, ...]:
    """A PodGroupUnschedulable Warning per PodGroup the scheduler could not place, in order.

    Only ``Unschedulable``: once the condition turns True it never reverts (the API's rule), so a
    scheduled gang stops the event; ``SchedulerError`` is the scheduler's own fault, not the
    JobSet's, and shows in the scheduler's log."""
    events = []
    for group in pod_groups:
        condition = scheduled_condition(group)
        if (
            condition is not None
            and condition.get("status") == "False"
            and condition.get("reason") == POD_GROUP_UNSCHEDULABLE_REASON
        ):
            message = str(condition.get("message") or "")
            note = pod_group_unschedulable_message(_name(group), message)
            events.append(Event(WARNING, POD_GROUP_UNSCHEDULABLE_EVENT, note, False))
    return tuple(events)


def scheduled_condition(pod_group: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The PodGroup's ``PodGroupInitiallyScheduled`` condition, if the scheduler set one."""
    status = pod_group.get("status")
    if not isinstance(status, Mapping):
        return None
    for condition in status.get("conditions") or ():
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") == POD_GROUP_SCHEDULED_CONDITION:
            return condition
    return None


def link_jobs(
    jobs: Sequence[Mapping[str, Any]], groups: tuple[SchedulingGroup, ...]
) -> tuple[Mapping[str, Any], ...]:
    """The Job manifests with their group's template annotation and pod ``schedulingGroup``."""
    if not groups:
        return tuple(jobs)
    return tuple(_linked(job, groups) for job in jobs)


def workload_manifest(js: JobSet, groups: tuple[SchedulingGroup, ...]) -> dict[str, Any]:
    """The JobSet's Workload: owned by it, one PodGroupTemplate per group."""
    return {
        "apiVersion": SCHEDULING_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(js),
            "namespace": js.metadata.namespace,
            "ownerReferences": [controller_reference(js)],
        },
        "spec": {
            "controllerRef": {
                "apiGroup": "jobset.x-k8s.io",
                "kind": "JobSet",
                "name": js.metadata.name,
            },
            "podGroupTemplates": [_template(group) for group in groups],
        },
    }


def pod_group_manifest(js: JobSet, group: SchedulingGroup) -> dict[str, Any]:
    """One PodGroup, made from its template and pointing back at it."""
    template = _template(group)
    del template["name"]
    return {
        "apiVersion": SCHEDULING_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": group.pod_group_name,
            "namespace": js.metadata.namespace,
            "ownerReferences": [controller_reference(js)],
        },
        "spec": {
            "workloadRef": {
                "workloadName": workload_name(js),
                "templateName": group.template_name,
            },
            **template,
        },
    }


def _template(group: SchedulingGroup) -> dict[str, Any]:
    template: dict[str, Any] = {"name": group.template_name, "schedulingPolicy": _policy_of(group)}
    if group.constraints:
        template["schedulingConstraints"] = group.constraints
    if group.disruption:
        template["disruptionMode"] = group.disruption
    if group.resource_claims:
        template["resourceClaims"] = [dict(claim) for claim in group.resource_claims]
    return template


def _policy_of(group: SchedulingGroup) -> dict[str, Any]:
    if group.policy == "Basic":
        return {"basic": {}}
    return {"gang": {"minCount": group.min_count}}


def _policy(spec: Any) -> Mapping[str, Any]:
    if not isinstance(spec, Mapping):
        return {}
    policy = spec.get("schedulingPolicy")
    return policy if isinstance(policy, Mapping) else {}


def _stale_min_count(group: SchedulingGroup, policy: Mapping[str, Any]) -> bool:
    gang = policy.get("gang")
    if group.policy != "Gang" or group.min_count_explicit or not isinstance(gang, Mapping):
        return False
    return bool(gang.get("minCount") != group.min_count)


def _min_count_patch(min_count: int | None) -> dict[str, Any]:
    return {"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def _workload_patch(
    workload: Mapping[str, Any], groups: tuple[SchedulingGroup, ...]
) -> dict[str, Any] | None:
    """A merge patch of podGroupTemplates when a computed minCount changed (the list is atomic
    for a merge patch, so it is sent whole, with the other fields as they are)."""
    spec = workload.get("spec") or {}
    templates = [dict(template) for template in spec.get("podGroupTemplates") or ()]
    by_name = {group.template_name: group for group in groups}
    changed = False
    for template in templates:
        group = by_name.get(str(template.get("name")))
        if group is not None and _stale_min_count(group, _policy(template)):
            template["schedulingPolicy"] = _policy_of(group)
            changed = True
    return {"spec": {"podGroupTemplates": templates}} if changed else None


def _deletes(snapshot: Snapshot) -> tuple[SchedulingWrite, ...]:
    """Deletes of the Workload and PodGroups not already being deleted: on Kubernetes 1.37 a
    PodGroup stays Terminating until no active pod names it (its podgroup-protection finalizer),
    and every pass of the suspended JobSet meanwhile would otherwise send the same DELETE."""
    writes = [
        SchedulingWrite("PodGroup", _name(group), uid=_uid(group))
        for group in snapshot.pod_groups
        if not _terminating(group)
    ]
    if snapshot.workload is not None and not _terminating(snapshot.workload):
        writes.append(
            SchedulingWrite("Workload", _name(snapshot.workload), uid=_uid(snapshot.workload))
        )
    return tuple(writes)


def _terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _linked(job: Mapping[str, Any], groups: tuple[SchedulingGroup, ...]) -> Mapping[str, Any]:
    metadata = job.get("metadata") or {}
    labels = metadata.get("labels") or {}
    rjob = str(labels.get(REPLICATED_JOB_NAME_KEY, ""))
    index = int(labels.get(JOB_INDEX_KEY, "0") or 0)
    group = group_of(groups, rjob, index)
    if group is None:
        return job
    annotations = {
        **(metadata.get("annotations") or {}),
        GROUP_TEMPLATE_ANNOTATION: group.template_name,
    }
    spec = dict(job.get("spec") or {})
    template = dict(spec.get("template") or {})
    pod_spec = dict(template.get("spec") or {})
    pod_spec["schedulingGroup"] = {"podGroupName": group.pod_group_name}
    template["spec"] = pod_spec
    spec["template"] = template
    return {**job, "metadata": {**metadata, "annotations": annotations}, "spec": spec}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))
