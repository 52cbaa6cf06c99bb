"""KEP-969 gang scheduling: how ``spec.scheduling`` maps a JobSet's pods onto PodGroups.

Pure and shared: validation needs the groups (their number, their pod counts) to judge a JobSet,
and reconcile needs the same groups to build the Workload, the PodGroups and the pods' links. One
function, ``scheduling_groups``, is the only statement of that mapping (docs/behaviour.md#gang-
scheduling):

- top-level mode (no ``replicatedJobs`` entries, startup not sequenced): one group for the whole
  JobSet, Gang by default, ``minCount`` = every pod unless given;
- sequenced startup (``startupPolicyOrder: InOrder`` or any ``dependsOn``) in top-level mode: one
  group per ReplicatedJob with the top-level policy, so Jobs created one ReplicatedJob after the
  other can each reach their quorum (a single group never could: no deadlock). Each group's
  ``minCount`` is every pod of its ReplicatedJob: an explicit top-level ``gang.minCount`` is
  ignored here (it counts the whole JobSet's pods, which no one group holds). Admission refuses
  that combination (gang_validation's ``MIN_COUNT_WITH_SEQUENCE``); a JobSet that reached
  the cluster without the webhook still maps, with the minCount dropped;
- ``replicatedJobs`` entries: one group per entry (its targets share it), Gang by default; with
  ``job``, one group per Job of its single target.

Names (KEP-969 "Naming Convention" and "Conflict detection"): the Workload is
``<jobset>-<hash>``; the top-level PodGroup has the same name; every other PodGroup is
``<jobset>-<item>-<hash>``, the prefix cut so the whole stays a 63-character DNS label. The hash
is the first 10 hex digits of SHA-1 over ``<kind>/<namespace>/<identity>`` of the object the
group stands for (JobSet, ReplicatedJob or Job), so two objects never share a name by accident.
The template name inside the Workload (and the Job annotation
``scheduling.k8s.io/group-template-name``) is the plain item name: the JobSet's name, the
ReplicatedJob's name, the targets joined with ``-``, or ``<replicatedjob>-<index>``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from jobset_controller.api.types import (
        DisruptionMode,
        JobSet,
        PodGroupResourceClaim,
        PodGroupSchedulingConstraints,
        PodGroupSchedulingPolicy,
        ReplicatedJob,
    )

SCHEDULING_GROUP: Final = "scheduling.k8s.io"
SCHEDULING_VERSION: Final = "v1beta1"
SCHEDULING_API_VERSION: Final = f"{SCHEDULING_GROUP}/{SCHEDULING_VERSION}"
GROUP_TEMPLATE_ANNOTATION: Final = "scheduling.k8s.io/group-template-name"
# scheduling.k8s.io/v1beta1 WorkloadMaxPodGroupTemplates.
MAX_POD_GROUP_TEMPLATES: Final = 8
_HASH_LENGTH: Final = 10
_MAX_NAME: Final = 63

Policy = Literal["Basic", "Gang"]


@dataclass(frozen=True)
class Member:
    """The pods of one ReplicatedJob (``job_index`` None: all its Jobs) or of one of its Jobs."""

    replicated_job: str
    job_index: int | None = None


@dataclass(frozen=True)
class SchedulingGroup:
    """One PodGroupTemplate of the Workload and the PodGroup made from it.

    Attributes:
        template_name: The template's name in the Workload (and the Jobs' annotation).
        pod_group_name: The PodGroup object's name, which the pods' ``schedulingGroup`` names.
        policy: Basic or Gang.
        min_count: Gang's quorum (None for Basic).
        min_count_explicit: ``minCount`` was written by the user (never patched on scaling).
        pod_count: The pods the group represents.
        members: Whose pods belong to it.
        constraints, disruption, resource_claims: Copied into the template and the PodGroup.
    """

    template_name: str
    pod_group_name: str
    policy: Policy
    min_count: int | None
    min_count_explicit: bool
    pod_count: int
    members: tuple[Member, ...]
    constraints: dict[str, Any] | None = None
    disruption: dict[str, Any] | None = None
    resource_claims: tuple[dict[str, Any], ...] = ()

    def holds(self, replicated_job: str, job_index: int) -> bool:
        """Whether the pods of Job ``job_index`` of ``replicated_job`` belong to this group."""
        return any(
            member.replicated_job == replicated_job
            and (member.job_index is None or member.job_index == job_index)
            for member in self.members
        )


def is_sequenced(js: JobSet) -> bool:
    """InOrder startup or any dependsOn: Jobs are created one ReplicatedJob after the other."""
    policy = js.spec.startup_policy
    if policy is not None and str(policy.startup_policy_order.value) == "InOrder":
        return True
    return any(rjob.depends_on for rjob in js.spec.replicated_jobs)


def pods_per_job(rjob: ReplicatedJob) -> int:
    """The pods one Job of the ReplicatedJob runs at once (``parallelism``, default 1)."""
    parallelism = rjob.template.spec.parallelism
    return 1 if parallelism is None else parallelism


def pod_count(rjob: ReplicatedJob) -> int:
    """The pods the ReplicatedJob represents: ``parallelism x replicas``."""
    return pods_per_job(rjob) * rjob.replicas


def name_hash(kind: str, namespace: str, identity: str) -> str:
    """The 10 hex digits that make a generated name collision-resistant."""
    digest = hashlib.sha1(f"{kind}/{namespace}/{identity}".encode(), usedforsecurity=False)
    return digest.hexdigest()[:_HASH_LENGTH]


def _hashed(prefix: str, digest: str) -> str:
    keep = _MAX_NAME - _HASH_LENGTH - 1
    return f"{prefix[:keep].rstrip('-.')}-{digest}"


def workload_name(js: JobSet) -> str:
    """The name of the JobSet's one Workload, ``<jobset>-<hash>``."""
    name = js.metadata.name or ""
    return _hashed(name, name_hash("JobSet", js.metadata.namespace or "", name))


def scheduling_groups(js: JobSet) -> tuple[SchedulingGroup, ...]:
    """The JobSet's groups, in the order of its ReplicatedJobs; () without ``spec.scheduling``.

    The JobSet is expected to have passed validation; unknown targets are skipped.
    """
    scheduling = js.spec.scheduling
    if scheduling is None:
        return ()
    rjobs = {rjob.name: rjob for rjob in js.spec.replicated_jobs}
    name = js.metadata.name or ""
    namespace = js.metadata.namespace or ""
    if not scheduling.replicated_jobs:
        common: tuple[
            PodGroupSchedulingPolicy | None,
            PodGroupSchedulingConstraints | None,
            DisruptionMode | None,
            list[PodGroupResourceClaim],
        ] = (
            scheduling.scheduling_policy,
            scheduling.scheduling_constraints,
            scheduling.disruption_mode,
            [],
        )
        if is_sequenced(js):
            return tuple(
                _group(
                    rjob.name,
                    _item_name(name, rjob.name, "ReplicatedJob", namespace, f"{name}/{rjob.name}"),
                    (Member(rjob.name),),
                    pod_count(rjob),
                    *common,
                    ignore_min_count=True,
                )
                for rjob in js.spec.replicated_jobs
            )
        everyone = tuple(Member(rjob.name) for rjob in js.spec.replicated_jobs)
        total = sum(pod_count(rjob) for rjob in js.spec.replicated_jobs)
        return (_group(name, workload_name(js), everyone, total, *common),)
    groups: list[SchedulingGroup] = []
    for entry in scheduling.replicated_jobs:
        targets = [target for target in entry.target_replicated_jobs if target in rjobs]
        if not targets:
            continue
        if entry.job is not None:
            rjob = rjobs[targets[0]]
            job = entry.job
            for index in range(rjob.replicas):
                item = f"{rjob.name}-{index}"
                identity = f"{name}/{rjob.name}/{index}"
                groups.append(
                    _group(
                        item,
                        _item_name(name, item, "Job", namespace, identity),
                        (Member(rjob.name, index),),
                        pods_per_job(rjob),
                        job.scheduling_policy,
                        job.scheduling_constraints,
                        job.disruption_mode,
                        job.resource_claims,
                    )
                )
            continue
        item = "-".join(targets)
        groups.append(
            _group(
                item,
                _item_name(name, item, "ReplicatedJob", namespace, f"{name}/{item}"),
                tuple(Member(target) for target in targets),
                sum(pod_count(rjobs[target]) for target in targets),
                entry.scheduling_policy,
                entry.scheduling_constraints,
                entry.disruption_mode,
                entry.resource_claims,
            )
        )
    return tuple(groups)


def group_of(
    groups: tuple[SchedulingGroup, ...], replicated_job: str, job_index: int
) -> SchedulingGroup | None:
    """The group whose PodGroup the pods of that Job join, if any."""
    return next((group for group in groups if group.holds(replicated_job, job_index)), None)


def duplicate_template_names(groups: tuple[SchedulingGroup, ...]) -> list[str]:
    """Template names that two groups share (``leader-worker`` vs ``[leader, worker]``)."""
    seen: set[str] = set()
    duplicates: list[str] = []
    for group in groups:
        if group.template_name in seen and group.template_name not in duplicates:
            duplicates.append(group.template_name)
        seen.add(group.template_name)
    return duplicates


def _item_name(jobset: str, item: str, kind: str, namespace: str, identity: str) -> str:
    return _hashed(f"{jobset}-{item}", name_hash(kind, namespace, identity))


def _group(
    template_name: str,
    pod_group_name: str,
    members: tuple[Member, ...],
    pods: int,
    policy: PodGroupSchedulingPolicy | None,
    constraints: PodGroupSchedulingConstraints | None,
    disruption: DisruptionMode | None,
    claims: list[PodGroupResourceClaim],
    *,
    ignore_min_count: bool = False,
) -> SchedulingGroup:
    basic = policy is not None and policy.basic is not None and policy.gang is None
    explicit = None
    if not basic and not ignore_min_count and policy is not None and policy.gang is not None:
        explicit = policy.gang.min_count
    min_count = None if basic else (explicit if explicit is not None else max(pods, 1))
    return SchedulingGroup(
        template_name=template_name,
        pod_group_name=pod_group_name,
        policy="Basic" if basic else "Gang",
        min_count=min_count,
        min_count_explicit=explicit is not None,
        pod_count=pods,
        members=members,
        constraints=None if constraints is None else constraints.to_dict(),
        disruption=None if disruption is None else disruption.to_dict(),
        resource_claims=tuple(claim.to_dict() for claim in claims),
    )
