"""Admission checks of ``spec.scheduling`` (KEP-969, gate JobSetWorkloadAwareSchedulingAPI).

The KEP's validation list, with messages in upstream's style (field path, kind, short lowercase
detail); docs/behaviour.md#gang-scheduling lists them. ``validate_create`` and
``validate_update`` (validation.py) call in here, so the webhook, ``jobset-controller validate``
and ``plan`` report the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from jobset_controller.api.features import FeatureGates
from jobset_controller.api.field_errors import FieldError
from jobset_controller.api.gang import (
    MAX_POD_GROUP_TEMPLATES,
    duplicate_template_names,
    is_sequenced,
    pod_count,
    pods_per_job,
    scheduling_groups,
)

if TYPE_CHECKING:
    from jobset_controller.api.types import (
        DisruptionMode,
        JobSet,
        PodGroupResourceClaim,
        PodGroupSchedulingPolicy,
        ReplicatedJobScheduling,
    )

PATH: Final = "spec.scheduling"
GATE_DISABLED: Final = (
    "scheduling cannot be set when JobSetWorkloadAwareSchedulingAPI feature gate is disabled"
)
LEVELS_EXCLUSIVE: Final = (
    "cannot set schedulingPolicy, schedulingConstraints, or disruptionMode together with "
    "replicatedJobs"
)
JOB_EXCLUSIVE: Final = (
    "cannot set schedulingPolicy, schedulingConstraints, disruptionMode, or resourceClaims "
    "together with job"
)
JOB_ONE_TARGET: Final = "must name exactly one replicatedJob when job is set"
ONE_POLICY: Final = "exactly one of basic or gang must be set"
ONE_DISRUPTION: Final = "exactly one of single or all must be set"
ONE_CLAIM_SOURCE: Final = (
    "exactly one of resourceClaimName or resourceClaimTemplateName must be set"
)
MIN_COUNT_WITH_SEQUENCE: Final = (
    "an explicit gang minCount cannot be set with DependsOn or InOrder startup, which use one "
    "PodGroup per ReplicatedJob"
)
NATIVE_SCHEDULING: Final = (
    "cannot be set on the Job template when spec.scheduling is set; the JobSet creates the "
    "Workload and PodGroups"
)
IMMUTABLE_WHILE_RUNNING: Final = "field is immutable while the JobSet is not suspended"


def check_scheduling(js: JobSet, features: FeatureGates) -> list[FieldError]:
    """Every error of ``spec.scheduling`` on create (and on update, against the new object)."""
    scheduling = js.spec.scheduling
    if scheduling is None:
        return []
    if not features.workload_aware_scheduling:
        return [FieldError(PATH, "Forbidden", GATE_DISABLED)]
    errors: list[FieldError] = []
    top_level = (
        scheduling.scheduling_policy is not None
        or scheduling.scheduling_constraints is not None
        or scheduling.disruption_mode is not None
    )
    if top_level and scheduling.replicated_jobs:
        errors.append(FieldError(PATH, "Forbidden", LEVELS_EXCLUSIVE))
    errors += _check_policy(f"{PATH}.schedulingPolicy", scheduling.scheduling_policy)
    errors += _check_disruption(f"{PATH}.disruptionMode", scheduling.disruption_mode)
    if not scheduling.replicated_jobs:
        errors += _check_top_level_min_count(js)
    else:
        errors += _check_entries(js, scheduling.replicated_jobs)
    errors += _check_templates(js)
    if not errors:
        errors += _check_groups(js)
    return errors


def check_scheduling_update(old: JobSet, new: JobSet) -> list[FieldError]:
    """``spec.scheduling`` may change only while the JobSet is (or becomes) suspended."""
    if old.spec.suspend or new.spec.suspend:
        return []
    before = None if old.spec.scheduling is None else old.spec.scheduling.to_dict()
    after = None if new.spec.scheduling is None else new.spec.scheduling.to_dict()
    if before == after:
        return []
    return [FieldError(PATH, "Invalid", IMMUTABLE_WHILE_RUNNING, after)]


def _check_policy(path: str, policy: PodGroupSchedulingPolicy | None) -> list[FieldError]:
    if policy is None or (policy.basic is None) != (policy.gang is None):
        return []
    return [FieldError(path, "Invalid", ONE_POLICY, policy.to_dict())]


def _check_disruption(path: str, mode: DisruptionMode | None) -> list[FieldError]:
    if mode is None or (mode.single is None) != (mode.all is None):
        return []
    return [FieldError(path, "Invalid", ONE_DISRUPTION, mode.to_dict())]


def _check_claims(path: str, claims: Sequence[PodGroupResourceClaim]) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, claim in enumerate(claims):
        claim_path = f"{path}[{index}]"
        if claim.name in seen:
            errors.append(FieldError(f"{claim_path}.name", "Duplicate", "", claim.name))
        seen.add(claim.name)
        if (claim.resource_claim_name is None) == (claim.resource_claim_template_name is None):
            errors.append(FieldError(claim_path, "Invalid", ONE_CLAIM_SOURCE, claim.to_dict()))
    return errors


def _check_top_level_min_count(js: JobSet) -> list[FieldError]:
    scheduling = js.spec.scheduling
    assert scheduling is not None
    policy = scheduling.scheduling_policy
    if policy is None or policy.gang is None or policy.gang.min_count is None:
        return []
    path = f"{PATH}.schedulingPolicy.gang.minCount"
    if is_sequenced(js):
        return [FieldError(path, "Forbidden", MIN_COUNT_WITH_SEQUENCE)]
    total = sum(pod_count(rjob) for rjob in js.spec.replicated_jobs)
    return _min_count_error(path, policy.gang.min_count, total)


def _min_count_error(path: str, min_count: int, pods: int) -> list[FieldError]:
    if min_count <= pods:
        return []
    message = f"must not exceed the number of pods the group represents ({pods})"
    return [FieldError(path, "Invalid", message, min_count)]


def _check_entries(js: JobSet, entries: Sequence[ReplicatedJobScheduling]) -> list[FieldError]:
    rjobs = {rjob.name: rjob for rjob in js.spec.replicated_jobs}
    errors: list[FieldError] = []
    targeted: set[str] = set()
    for index, entry in enumerate(entries):
        path = f"{PATH}.replicatedJobs[{index}]"
        errors += _check_targets(path, entry, rjobs, targeted)
        errors += _check_policy(f"{path}.schedulingPolicy", entry.scheduling_policy)
        errors += _check_disruption(f"{path}.disruptionMode", entry.disruption_mode)
        errors += _check_claims(f"{path}.resourceClaims", entry.resource_claims)
        known = [target for target in entry.target_replicated_jobs if target in rjobs]
        if entry.job is not None:
            errors += _check_job_level(path, entry)
            job = entry.job
            errors += _check_policy(f"{path}.job.schedulingPolicy", job.scheduling_policy)
            errors += _check_disruption(f"{path}.job.disruptionMode", job.disruption_mode)
            errors += _check_claims(f"{path}.job.resourceClaims", job.resource_claims)
            policy = job.scheduling_policy
            gang = None if policy is None else policy.gang
            if len(known) == 1 and gang is not None and gang.min_count is not None:
                errors += _min_count_error(
                    f"{path}.job.schedulingPolicy.gang.minCount",
                    gang.min_count,
                    pods_per_job(rjobs[known[0]]),
                )
            continue
        policy = entry.scheduling_policy
        if policy is not None and policy.gang is not None and policy.gang.min_count is not None:
            pods = sum(pod_count(rjobs[target]) for target in known)
            errors += _min_count_error(
                f"{path}.schedulingPolicy.gang.minCount", policy.gang.min_count, pods
            )
    for rjob in js.spec.replicated_jobs:
        if rjob.name not in targeted:
            message = (
                f"replicatedJob '{rjob.name}' must be targeted by a replicatedJobs entry when no "
                "top-level scheduling is set"
            )
            errors.append(FieldError(f"{PATH}.replicatedJobs", "Required", message))
    return errors


def _check_targets(
    path: str, entry: ReplicatedJobScheduling, rjobs: dict[str, Any], targeted: set[str]
) -> list[FieldError]:
    if not entry.target_replicated_jobs:
        return [FieldError(f"{path}.targetReplicatedJobs", "Required", "")]
    errors: list[FieldError] = []
    for index, target in enumerate(entry.target_replicated_jobs):
        target_path = f"{path}.targetReplicatedJobs[{index}]"
        if target not in rjobs:
            message = (
                f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs"
            )
            errors.append(FieldError(target_path, "Invalid", message, target))
        elif target in targeted:
            errors.append(FieldError(target_path, "Duplicate", "", target))
        targeted.add(target)
    return errors


def _check_job_level(path: str, entry: ReplicatedJobScheduling) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(entry.target_replicated_jobs) != 1:
        errors.append(
            FieldError(
                f"{path}.targetReplicatedJobs",
                "Invalid",
                JOB_ONE_TARGET,
                entry.target_replicated_jobs,
            )
        )
    if (
        entry.scheduling_policy is not None
        or entry.scheduling_constraints is not None
        or entry.disruption_mode is not None
        or entry.resource_claims
    ):
        errors.append(FieldError(path, "Forbidden", JOB_EXCLUSIVE))
    return errors


def _check_templates(js: JobSet) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, rjob in enumerate(js.spec.replicated_jobs):
        job_spec = rjob.template.spec.to_dict()
        path = f"spec.replicatedJobs[{index}].template.spec"
        if job_spec.get("scheduling") is not None:
            errors.append(FieldError(f"{path}.scheduling", "Forbidden", NATIVE_SCHEDULING))
        pod_spec = (job_spec.get("template") or {}).get("spec") or {}
        if pod_spec.get("schedulingGroup") is not None:
            errors.append(
                FieldError(f"{path}.template.spec.schedulingGroup", "Forbidden", NATIVE_SCHEDULING)
            )
    return errors


def _check_groups(js: JobSet) -> list[FieldError]:
    groups = scheduling_groups(js)
    errors: list[FieldError] = []
    if len(groups) > MAX_POD_GROUP_TEMPLATES:
        message = (
            f"must produce at most {MAX_POD_GROUP_TEMPLATES} PodGroups (the Workload API's limit "
            f"of podGroupTemplates), got {len(groups)}"
        )
        errors.append(FieldError(PATH, "Invalid", message, len(groups)))
    for name in duplicate_template_names(groups):
        message = f"two scheduling groups are named '{name}'; rename a replicatedJob"
        errors.append(FieldError(PATH, "Invalid", message, name))
    if len(groups) == 1 and len(groups[0].members) > 1:
        classes = {
            (rjob.template.spec.template.spec.to_dict().get("priorityClassName") or "")
            for rjob in js.spec.replicated_jobs
        }
        if len(classes) > 1:
            message = "a single PodGroup needs one priorityClassName across all replicatedJobs"
            errors.append(FieldError(PATH, "Invalid", message, sorted(classes)))
    return errors
