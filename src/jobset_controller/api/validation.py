"""Admission validation of JobSets: the validating webhook's checks (docs/behaviour.md#validation).

Why pure functions over an object: the webhook, the CLI and SDK users all need the same answer,
and none of them should need a cluster for it. The only outside fact a check needs (which PVCs
already exist) is an argument.

Contract:

* ``validate_create`` runs every CREATE check in upstream's order and returns all errors found.
  It expects the object as admission sees it (callers default first, see ``defaults``), but reads
  an absent field as its default, so a non-defaulted object never crashes it and gives the same
  answer as after defaulting.
* ``validate_update`` runs the UPDATE checks (the CRD's update rules, immutability with its
  carve-outs, managedBy); create-time checks are not repeated, with one exception: when the old
  or the new object has ``spec.scheduling``, ``check_scheduling`` runs again on the new one (as
  well as ``check_scheduling_update``), because ``spec.scheduling`` may change while suspended
  and the changed groups must still be ones a gang can form, as on create.
* Both start with the CRD's CEL rules (``crd_rules``): the API server enforces those before the
  webhook, so the webhook itself may skip them.
* Message texts are upstream's exactly. Upstream reports some failures as plain errors without a
  field path; here each one carries the path of the field to change. The kinds chosen for those
  (``Invalid`` for a bad value, ``Forbidden`` for a field that may not be set, ``Duplicate`` for
  repeated rule names) are ours; where upstream builds a field error we keep its kind.
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jobset_controller.api.constants import (
    COORDINATOR_KEY,
    INDEXED_COMPLETION,
    MAX_INT32,
    MAX_JOB_RESTART_REPLICAS,
    POD_REPLACEMENT_POLICY_FAILED,
    RESTART_JOB_ACTIONS,
    ConditionStatus,
    ConditionType,
    JobFailureReason,
    RestartStrategy,
    RetentionWhenDeleted,
)
from jobset_controller.api.crd_rules import (
    validate_crd_rules_on_create,
    validate_crd_rules_on_update,
)
from jobset_controller.api.defaults import effective_completion_mode, effective_rule_name
from jobset_controller.api.features import FeatureGates
from jobset_controller.api.field_errors import FieldError, render_bad_value
from jobset_controller.api.gang_validation import check_scheduling, check_scheduling_update
from jobset_controller.api.message_patterns import pattern_error
from jobset_controller.api.name_checks import (
    byte_length,
    is_dns1035_label,
    is_dns1123_subdomain,
    is_domain_prefixed_path,
    is_valid_label_value,
    max_len_error,
)
from jobset_controller.api.naming import (
    RANDOM_SUFFIX_PLACEHOLDER,
    coordinator_endpoint,
    job_name,
    name_for_validation,
    pod_hostname,
    pvc_name,
    subdomain,
)
from jobset_controller.api.types import (
    Coordinator,
    FailurePolicy,
    JobSet,
    PersistentVolumeClaim,
    ReplicatedJob,
    VolumeClaimPolicy,
)

DEFAULT_FEATURES: Final = FeatureGates()

# apimachinery's DNS-1035 length message; upstream swaps it for a JobSet-specific one on a match.
_DNS1035_TOO_LONG: Final = max_len_error(63)
GROUP_NAME_TOO_LONG: Final = (
    ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
)
SUBDOMAIN_TOO_LONG: Final = ".spec.network.subdomain is too long, must be less than 63 characters"
JOB_NAME_TOO_LONG: Final = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
POD_NAME_TOO_LONG: Final = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)
IN_PLACE_RESTART_GATE_DISABLED: Final = (
    "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"
)
FIRST_REPLICATED_JOB_DEPENDS_ON: Final = "DependsOn can't be set for the first ReplicatedJob"
RESTART_JOB_GATE_DISABLED: Final = (
    "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed "
    "when RestartJob feature gate is disabled"
)
RESTART_JOB_TOO_MANY_REPLICAS: Final = (
    "JobSet cannot have a failure policy rule with RestartJob or RestartJobAndIgnoreMaxRestarts "
    f"action and a replicated job with replicas > {MAX_JOB_RESTART_REPLICAS}"
)
COORDINATOR_NOT_INDEXED: Final = (
    "job for coordinator pod must be indexed completion mode, and completions number must be set"
)
VOLUME_CLAIM_NAMES_NOT_UNIQUE: Final = "names must be unique for VolumeClaimPolicies template"
VOLUME_CLAIM_NAME_TOO_LONG: Final = "VolumeClaimPolicies template name is too long"
RETENTION_MUST_BE_RETAIN: Final = "retentionPolicy must be retain when PVC exists"
ELASTIC_TERMINAL_STATE: Final = (
    "Cannot mutate parallelism or completions when JobSet is in a terminal state "
    "(Completed or Failed)"
)
ELASTIC_PARALLELISM_BELOW_ONE: Final = "parallelism must be >= 1"
ELASTIC_COMPLETIONS_BELOW_ONE: Final = "completions must be >= 1"
ELASTIC_NOT_EQUAL: Final = "completions must be equal to parallelism for Elastic Indexed Jobs"
FIELD_IS_IMMUTABLE: Final = "field is immutable"

_MAX_MANAGED_BY_LENGTH: Final = 63
_MAX_PVC_NAME_LENGTH: Final = 63
_MIN_RULE_NAME_LENGTH: Final = 1
_MAX_RULE_NAME_LENGTH: Final = 128
# Same pattern as a metav1.Condition reason: the rule name ends up in the Restarting reason.
_RULE_NAME_PATTERN: Final = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_VALID_FAILURE_REASONS: Final = frozenset(reason.value for reason in JobFailureReason)

# Pod template fields Kueue may rewrite while a JobSet is (or is becoming) suspended
# (docs/behaviour.md#validation-update), as paths below a replicatedJob's wire dict.
_SUSPENDED_MUTABLE_PATHS: Final = (
    ("template", "spec", "template", "metadata", "labels"),
    ("template", "spec", "template", "metadata", "annotations"),
    ("template", "spec", "template", "spec", "nodeSelector"),
    ("template", "spec", "template", "spec", "tolerations"),
    ("template", "spec", "template", "spec", "schedulingGates"),
)
# MutablePodResourcesForSuspendedJobSets (KEP-1150): what may change in the resources of a
# container or init container (matched by name) while suspended; claims may not.
_CONTAINER_LISTS: Final = ("containers", "initContainers")
_MUTABLE_RESOURCE_FIELDS: Final = ("requests", "limits")
_ELASTIC_MUTABLE_PATHS: Final = (
    ("template", "spec", "parallelism"),
    ("template", "spec", "completions"),
)


# --- CREATE ----------------------------------------------------------------------------------


def validate_create(
    js: JobSet,
    *,
    features: FeatureGates = DEFAULT_FEATURES,
    existing_pvcs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[FieldError]:
    """All errors admission reports when ``js`` is created, in upstream's order.

    Args:
        js: The JobSet, normally already defaulted.
        features: Gates the webhook runs with.
        existing_pvcs: PVCs already in the JobSet's namespace, by name, as wire dicts. When given,
            a volumeClaimPolicies template whose PVC exists must match it and be retained; when
            None those checks (the only ones needing the cluster) are skipped.
    """
    name = name_for_validation(js.metadata)
    return [
        *validate_crd_rules_on_create(js),
        *_check_in_place_restart_gate(js, features),
        *_check_first_replicated_job_has_no_depends_on(js),
        *_check_subdomain(js),
        *_check_managed_by(js),
        *_check_replicated_jobs(js, name, features),
        *_check_success_policy_targets(js),
        *_check_failure_policy(js, features),
        *_check_coordinator(js, name),
        *_check_volume_claim_policies(js, name, existing_pvcs),
        *check_scheduling(js, features),
    ]


def _rjob_path(index: int) -> str:
    return f"spec.replicatedJobs[{index}]"


def _uses_in_place_restart(js: JobSet) -> bool:
    policy = js.spec.failure_policy
    return policy is not None and policy.restart_strategy == RestartStrategy.IN_PLACE_RESTART


def _check_in_place_restart_gate(js: JobSet, features: FeatureGates) -> list[FieldError]:
    if features.in_place_restart or not _uses_in_place_restart(js):
        return []
    return [
        FieldError(
            "spec.failurePolicy.restartStrategy", "Forbidden", IN_PLACE_RESTART_GATE_DISABLED
        )
    ]


def _check_first_replicated_job_has_no_depends_on(js: JobSet) -> list[FieldError]:
    rjobs = js.spec.replicated_jobs
    # Upstream checks for a non-nil list, so even an explicit empty dependsOn is rejected.
    if not rjobs or rjobs[0].depends_on is None:
        return []
    return [FieldError(f"{_rjob_path(0)}.dependsOn", "Forbidden", FIRST_REPLICATED_JOB_DEPENDS_ON)]


def _check_subdomain(js: JobSet) -> list[FieldError]:
    network = js.spec.network
    if network is None or not network.subdomain:
        return []
    value = network.subdomain
    # The subdomain names a Service too, so it must be a DNS-1035 label as well as a subdomain.
    messages = is_dns1123_subdomain(value) + [
        SUBDOMAIN_TOO_LONG if _DNS1035_TOO_LONG in message else message
        for message in is_dns1035_label(value)
    ]
    return [FieldError("spec.network.subdomain", "Invalid", message, value) for message in messages]


def _check_managed_by(js: JobSet) -> list[FieldError]:
    value = js.spec.managed_by
    if value is None:
        return []
    errors = is_domain_prefixed_path("spec.managedBy", value)
    if byte_length(value) > _MAX_MANAGED_BY_LENGTH:
        errors.append(
            FieldError(
                "spec.managedBy",
                "TooLong",
                f"may not be more than {_MAX_MANAGED_BY_LENGTH} bytes",
                value,
            )
        )
    return errors


def _check_replicated_jobs(js: JobSet, name: str, features: FeatureGates) -> list[FieldError]:
    errors: list[FieldError] = []
    check_in_place = features.in_place_restart and _uses_in_place_restart(js)
    seen: set[str] = set()
    for index, rjob in enumerate(js.spec.replicated_jobs):
        path = _rjob_path(index)
        seen.add(rjob.name)
        errors += _check_pod_count(path, rjob)
        errors += _check_group_name(path, rjob)
        errors += _check_generated_names(path, rjob, name)
        errors += _check_depends_on(path, rjob, seen)
        if check_in_place:
            errors += _check_in_place_restart_template(path, rjob)
    return errors


def _check_pod_count(path: str, rjob: ReplicatedJob) -> list[FieldError]:
    parallelism = rjob.template.spec.parallelism
    if (1 if parallelism is None else parallelism) * rjob.replicas <= MAX_INT32:
        return []
    message = (
        f"the product of replicas and parallelism must not exceed {MAX_INT32} "
        f"for replicatedJob '{rjob.name}'"
    )
    return [FieldError(f"{path}.replicas", "Invalid", message, rjob.replicas)]


def _check_group_name(path: str, rjob: ReplicatedJob) -> list[FieldError]:
    return [
        FieldError(
            f"{path}.groupName",
            "Invalid",
            GROUP_NAME_TOO_LONG if _DNS1035_TOO_LONG in message else message,
            rjob.group_name,
        )
        for message in is_dns1035_label(rjob.group_name)
    ]


def _check_generated_names(path: str, rjob: ReplicatedJob, name: str) -> list[FieldError]:
    """The longest Job name, and for Indexed Jobs the longest pod name, must be DNS-1035 labels.

    These are the only checks of the JobSet and replicatedJob names: names are validated through
    the names derived from them.
    """
    longest_job = job_name(name, rjob.name, rjob.replicas - 1)
    errors = _generated_name_errors(f"{path}.name", longest_job, JOB_NAME_TOO_LONG)
    job_spec = rjob.template.spec
    if effective_completion_mode(job_spec) != INDEXED_COMPLETION or job_spec.completions is None:
        return errors
    longest_pod = (
        pod_hostname(name, rjob.name, rjob.replicas - 1, job_spec.completions - 1)
        + f"-{RANDOM_SUFFIX_PLACEHOLDER}"
    )
    # Upstream reports the longest Job name as the invalid value of a pod name error too.
    return errors + _generated_name_errors(
        f"{path}.name", longest_pod, POD_NAME_TOO_LONG, reported=longest_job
    )


def _generated_name_errors(
    path: str, generated: str, too_long: str, *, reported: str | None = None
) -> list[FieldError]:
    """DNS-1035 errors of a generated name, the length error replaced by upstream's message;
    the value shown is `reported` (default: the generated name)."""
    value = generated if reported is None else reported
    return [
        FieldError(path, "Invalid", too_long if _DNS1035_TOO_LONG in message else message, value)
        for message in is_dns1035_label(generated)
    ]


def _check_depends_on(path: str, rjob: ReplicatedJob, seen: set[str]) -> list[FieldError]:
    # `seen` includes this replicatedJob itself, so a self-dependency passes, as upstream.
    return [
        FieldError(
            f"{path}.dependsOn[{index}].name",
            "Invalid",
            f"replicatedJob: {rjob.name} cannot depend on replicatedJob: {dependency.name}",
            dependency.name,
        )
        for index, dependency in enumerate(rjob.depends_on or [])
        if dependency.name not in seen
    ]


def _check_in_place_restart_template(path: str, rjob: ReplicatedJob) -> list[FieldError]:
    job_spec = rjob.template.spec
    spec_path = f"{path}.template.spec"
    errors: list[FieldError] = []
    if job_spec.backoff_limit != MAX_INT32:
        message = (
            f"replicatedJob {rjob.name}: must be set to {MAX_INT32} (MaxInt32) "
            "when in-place restart is enabled"
        )
        errors.append(
            FieldError(f"{spec_path}.backoffLimit", "Invalid", message, job_spec.backoff_limit)
        )
    if job_spec.pod_replacement_policy != POD_REPLACEMENT_POLICY_FAILED:
        message = (
            f"replicatedJob {rjob.name}: must be set to {POD_REPLACEMENT_POLICY_FAILED} "
            "when in-place restart is enabled"
        )
        errors.append(
            FieldError(
                f"{spec_path}.podReplacementPolicy",
                "Invalid",
                message,
                job_spec.pod_replacement_policy,
            )
        )
    if job_spec.completions is None or job_spec.completions != job_spec.parallelism:
        message = (
            f"replicatedJob {rjob.name}: completions and parallelism must be set and equal "
            "to each other when in-place restart is enabled"
        )
        errors.append(
            FieldError(f"{spec_path}.completions", "Invalid", message, job_spec.completions)
        )
    return errors


def _check_success_policy_targets(js: JobSet) -> list[FieldError]:
    policy = js.spec.success_policy
    if policy is None:
        return []
    names = {rjob.name for rjob in js.spec.replicated_jobs}
    return [
        FieldError(
            f"spec.successPolicy.targetReplicatedJobs[{index}]",
            "Invalid",
            f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs",
            target,
        )
        for index, target in enumerate(policy.target_replicated_jobs)
        if target not in names
    ]


def _check_failure_policy(js: JobSet, features: FeatureGates) -> list[FieldError]:
    policy = js.spec.failure_policy
    if policy is None:
        return []
    restart_job_rules = [
        index for index, rule in enumerate(policy.rules) if rule.action in RESTART_JOB_ACTIONS
    ]
    errors: list[FieldError] = []
    if restart_job_rules:
        if not features.restart_job:
            # Upstream stops here: the other failure policy checks are skipped.
            path = f"spec.failurePolicy.rules[{restart_job_rules[0]}].action"
            return [FieldError(path, "Forbidden", RESTART_JOB_GATE_DISABLED)]
        errors += _check_restart_job_replicas(js.spec.replicated_jobs)
    names = {rjob.name for rjob in js.spec.replicated_jobs}
    for index in range(len(policy.rules)):
        errors += _check_failure_policy_rule(policy, index, names)
    errors += _check_rule_names_unique(policy)
    return errors


def _check_restart_job_replicas(rjobs: Sequence[ReplicatedJob]) -> list[FieldError]:
    for index, rjob in enumerate(rjobs):
        if rjob.replicas > MAX_JOB_RESTART_REPLICAS:
            path = f"{_rjob_path(index)}.replicas"
            return [FieldError(path, "Invalid", RESTART_JOB_TOO_MANY_REPLICAS, rjob.replicas)]
    return []


def _check_failure_policy_rule(
    policy: FailurePolicy, index: int, names: set[str]
) -> list[FieldError]:
    rule = policy.rules[index]
    path = f"spec.failurePolicy.rules[{index}]"
    name = effective_rule_name(rule, index)
    errors: list[FieldError] = []
    length = byte_length(name)
    if not _MIN_RULE_NAME_LENGTH <= length <= _MAX_RULE_NAME_LENGTH:
        message = (
            f"invalid failure policy rule name of length {length}, the rule name must be at least "
            f"{_MIN_RULE_NAME_LENGTH} characters long and at most {_MAX_RULE_NAME_LENGTH} "
            "characters long"
        )
        errors.append(FieldError(f"{path}.name", "Invalid", message, name))
    if not _is_valid_rule_name(name):
        message = (
            f"invalid failure policy rule name '{name}', a failure policy rule name must start "
            "with an alphabetic character, optionally followed by a string of alphanumeric "
            "characters or '_,:', and must end with an alphanumeric character or '_'"
        )
        errors.append(FieldError(f"{path}.name", "Invalid", message, name))
    errors += [
        FieldError(
            f"{path}.targetReplicatedJobs[{target_index}]",
            "Invalid",
            f"invalid replicatedJob name '{target}' in failure policy does not appear in "
            ".spec.ReplicatedJobs",
            target,
        )
        for target_index, target in enumerate(rule.target_replicated_jobs)
        if target not in names
    ]
    errors += [
        FieldError(
            f"{path}.onJobFailureReasons[{reason_index}]",
            "Invalid",
            f"invalid job failure reason '{reason}' in failure policy is not a recognized job "
            "failure reason",
            reason,
        )
        for reason_index, reason in enumerate(rule.on_job_failure_reasons)
        if reason not in _VALID_FAILURE_REASONS
    ]
    errors += _check_message_patterns(path, rule.on_job_failure_message_patterns)
    return errors


def _check_message_patterns(path: str, patterns: Sequence[str]) -> list[FieldError]:
    """Each pattern must compile as Go's ``regexp`` compiles it (RE2 syntax).

    When a Job fails, a pattern that does not compile is skipped, so a typo would silently
    disable the rule; rejecting it at admission tells the user instead.
    """
    errors: list[FieldError] = []
    for pattern_index, pattern in enumerate(patterns):
        problem = pattern_error(pattern)
        if problem is not None:
            message = (
                "invalid job failure message pattern in failure policy is not a valid RE2 "
                f"regular expression: {problem}"
            )
            field = f"{path}.onJobFailureMessagePatterns[{pattern_index}]"
            errors.append(FieldError(field, "Invalid", message, pattern))
    return errors


def _is_valid_rule_name(name: str) -> bool:
    return re.fullmatch(_RULE_NAME_PATTERN, name) is not None


def _check_rule_names_unique(policy: FailurePolicy) -> list[FieldError]:
    """One error per repeated name, on the second rule using it, listing every index (Go %v)."""
    indices_by_name: dict[str, list[int]] = {}
    for index, rule in enumerate(policy.rules):
        indices_by_name.setdefault(effective_rule_name(rule, index), []).append(index)
    errors: list[FieldError] = []
    for name, indices in indices_by_name.items():
        if len(indices) < 2:
            continue
        listed = " ".join(str(index) for index in indices)
        message = (
            f"rule names are not unique, rules with indices [{listed}] "
            f"all have the same name '{name}'"
        )
        path = f"spec.failurePolicy.rules[{indices[1]}].name"
        errors.append(FieldError(path, "Duplicate", message, name))
    return errors


def _check_coordinator(js: JobSet, name: str) -> list[FieldError]:
    coordinator = js.spec.coordinator
    if coordinator is None:
        return []
    errors = _first_coordinator_error(js, coordinator)
    endpoint = coordinator_endpoint(name, coordinator, subdomain(name, js.spec.network))
    problems = is_valid_label_value(endpoint)
    if problems:
        message = (
            f"spec will lead to invalid label value {render_bad_value(endpoint)} "
            f'for coordinator label "{COORDINATOR_KEY}" '
            "(long JobSet / ReplicatedJob / SubDomain name?): " + ", ".join(problems)
        )
        errors.append(FieldError("spec.coordinator", "Invalid", message, endpoint))
    return errors


def _first_coordinator_error(js: JobSet, coordinator: Coordinator) -> list[FieldError]:
    """Upstream stops at the first failing coordinator check, in this order."""
    found = next(
        (
            (index, rjob)
            for index, rjob in enumerate(js.spec.replicated_jobs)
            if rjob.name == coordinator.replicated_job
        ),
        None,
    )
    if found is None:
        message = f"coordinator replicatedJob {coordinator.replicated_job} does not exist"
        return [
            FieldError(
                "spec.coordinator.replicatedJob", "Invalid", message, coordinator.replicated_job
            )
        ]
    index, rjob = found
    if not 0 <= coordinator.job_index < rjob.replicas:
        message = (
            f"coordinator job index {coordinator.job_index} is invalid "
            f"for replicatedJob {rjob.name}"
        )
        return [FieldError("spec.coordinator.jobIndex", "Invalid", message, coordinator.job_index)]
    job_spec = rjob.template.spec
    spec_path = f"{_rjob_path(index)}.template.spec"
    mode = effective_completion_mode(job_spec)
    if mode != INDEXED_COMPLETION:
        return [FieldError(f"{spec_path}.completionMode", "Invalid", COORDINATOR_NOT_INDEXED, mode)]
    if job_spec.completions is None:
        return [FieldError(f"{spec_path}.completions", "Invalid", COORDINATOR_NOT_INDEXED, None)]
    if not 0 <= coordinator.pod_index < job_spec.completions:
        message = (
            f"coordinator pod index {coordinator.pod_index} is invalid for replicatedJob "
            f"{coordinator.replicated_job} job index {coordinator.job_index}"
        )
        return [FieldError("spec.coordinator.podIndex", "Invalid", message, coordinator.pod_index)]
    return []


def _check_volume_claim_policies(
    js: JobSet, name: str, existing_pvcs: Mapping[str, Mapping[str, Any]] | None
) -> list[FieldError]:
    errors: list[FieldError] = []
    claim_names: set[str] = set()
    for policy_index, policy in enumerate(js.spec.volume_claim_policies):
        for template_index, template in enumerate(policy.templates):
            path = f"spec.volumeClaimPolicies[{policy_index}].templates[{template_index}]"
            template_name = template.metadata.name or ""
            errors += _check_claim_template_name(path, template_name, name, claim_names)
            errors += _check_claim_is_mounted(js.spec.replicated_jobs, path, template_name)
            if existing_pvcs is not None:
                errors += _check_existing_pvc(
                    js, name, policy, policy_index, path, template, existing_pvcs
                )
            claim_names.add(template_name)
    return errors


def _check_claim_template_name(
    path: str, template_name: str, jobset_name: str, claim_names: set[str]
) -> list[FieldError]:
    name_path = f"{path}.metadata.name"
    errors: list[FieldError] = []
    if template_name in claim_names:
        errors.append(
            FieldError(name_path, "Invalid", VOLUME_CLAIM_NAMES_NOT_UNIQUE, template_name)
        )
    errors += [
        FieldError(name_path, "Invalid", message, template_name)
        for message in is_dns1123_subdomain(template_name)
    ]
    if byte_length(pvc_name(template_name, jobset_name)) > _MAX_PVC_NAME_LENGTH:
        errors.append(FieldError(name_path, "Invalid", VOLUME_CLAIM_NAME_TOO_LONG, template_name))
    return errors


def _check_claim_is_mounted(
    rjobs: Sequence[ReplicatedJob], path: str, template_name: str
) -> list[FieldError]:
    """No pod template may declare a volume of that name, and some container must mount it."""
    errors: list[FieldError] = []
    mounted = False
    for rjob_index, rjob in enumerate(rjobs):
        pod_spec = rjob.template.spec.template.spec
        volumes_path = f"{_rjob_path(rjob_index)}.template.spec.template.spec.volumes"
        errors += [
            FieldError(
                f"{volumes_path}[{volume_index}].name",
                "Invalid",
                f"volume name conflicts with VolumeClaimPolicy template name: {template_name}",
                volume.name,
            )
            for volume_index, volume in enumerate(pod_spec.volumes)
            if volume.name == template_name
        ]
        containers = [*pod_spec.init_containers, *pod_spec.containers]
        mounted = mounted or any(
            mount.name == template_name
            for container in containers
            for mount in container.volume_mounts
        )
    if not mounted:
        message = (
            f"replicatedJob containers don't have a matching volumeMount: {template_name} "
            "from VolumeClaimPolicies"
        )
        errors.append(FieldError(f"{path}.metadata.name", "Invalid", message, template_name))
    return errors


def _check_existing_pvc(
    js: JobSet,
    jobset_name: str,
    policy: VolumeClaimPolicy,
    policy_index: int,
    path: str,
    template: PersistentVolumeClaim,
    existing_pvcs: Mapping[str, Mapping[str, Any]],
) -> list[FieldError]:
    claim = pvc_name(template.metadata.name or "", jobset_name)
    existing = existing_pvcs.get(claim)
    if existing is None:
        return []
    errors: list[FieldError] = []
    if _semantic_form(existing.get("spec")) != _semantic_form(template.spec):
        namespace = js.metadata.namespace or ""
        message = f"spec does not match existing PVC {claim} in namespace {namespace}"
        errors.append(FieldError(f"{path}.spec", "Invalid", message, template.spec))
    retention = policy.retention_policy
    when_deleted = RetentionWhenDeleted.DELETE if retention is None else retention.when_deleted
    if when_deleted != RetentionWhenDeleted.RETAIN:
        field = f"spec.volumeClaimPolicies[{policy_index}].retentionPolicy.whenDeleted"
        errors.append(FieldError(field, "Invalid", RETENTION_MUST_BE_RETAIN, when_deleted.value))
    return errors


# --- UPDATE ----------------------------------------------------------------------------------


def validate_update(
    old: JobSet, new: JobSet, *, features: FeatureGates = DEFAULT_FEATURES
) -> list[FieldError]:
    """Admission errors when ``old`` is updated to ``new`` (docs/behaviour.md#validation-update).

    replicatedJobs are immutable except for the carve-outs (elastic parallelism/completions with
    the ElasticJobSet gate; five pod-template fields while old or new is suspended, and with the
    MutablePodResourcesForSuspendedJobSets gate the containers' resource requests and limits),
    and managedBy is immutable. Comparison is semantic, as Go's: an absent field equals its
    default, and null, empty lists and empty maps equal absence.
    """
    errors = validate_crd_rules_on_update(old, new)
    if features.elastic_job_set:
        errors += _check_elastic_changes(old, new)
    if not _replicated_jobs_equal_outside_carve_outs(old, new, features):
        new_value = [rjob.to_dict() for rjob in new.spec.replicated_jobs]
        errors.append(FieldError("spec.replicatedJobs", "Invalid", FIELD_IS_IMMUTABLE, new_value))
    if new.spec.managed_by != old.spec.managed_by:
        errors.append(
            FieldError("spec.managedBy", "Invalid", FIELD_IS_IMMUTABLE, new.spec.managed_by)
        )
    if new.spec.scheduling is not None or old.spec.scheduling is not None:
        errors += check_scheduling_update(old, new)
        errors += check_scheduling(new, features)
    return errors


def _replicated_jobs_equal_outside_carve_outs(
    old: JobSet, new: JobSet, features: FeatureGates
) -> bool:
    """Whether the replicatedJobs are semantically equal once the mutable fields are masked.

    Masking copies old values over new ones, for replicatedJobs matched by name, as upstream does.
    """
    old_by_name = {rjob.name: rjob for rjob in old.spec.replicated_jobs}
    new_views: list[dict[str, Any]] = []
    for rjob in new.spec.replicated_jobs:
        view = _full_dump(rjob)
        old_rjob = old_by_name.get(rjob.name)
        if old_rjob is not None:
            old_view = _full_dump(old_rjob)
            for path in _mutable_paths(old, new, rjob, features):
                _copy_path(old_view, view, path)
            if _suspended(old, new) and features.mutable_pod_resources_for_suspended_job_sets:
                _copy_container_resources(old_view, view)
        new_views.append(view)
    old_views = [_full_dump(rjob) for rjob in old.spec.replicated_jobs]
    return _semantic_form(new_views) == _semantic_form(old_views)


def _full_dump(rjob: ReplicatedJob) -> dict[str, Any]:
    """Wire dict including declared defaults, so an absent field compares equal to its default."""
    return rjob.model_dump(mode="json", by_alias=True)


def _mutable_paths(
    old: JobSet, new: JobSet, rjob: ReplicatedJob, features: FeatureGates
) -> list[tuple[str, ...]]:
    """Paths exempt from the immutability check (docs/behaviour.md#validation-update, 1 and 2)."""
    paths: list[tuple[str, ...]] = []
    if features.elastic_job_set and _is_indexed(rjob):
        paths += _ELASTIC_MUTABLE_PATHS
    if _suspended(old, new):
        paths += _SUSPENDED_MUTABLE_PATHS
    return paths


def _suspended(old: JobSet, new: JobSet) -> bool:
    """The JobSet is suspended, or becomes suspended with this update."""
    return bool(old.spec.suspend or new.spec.suspend)


def _copy_container_resources(source: dict[str, Any], target: dict[str, Any]) -> None:
    """MutablePodResourcesForSuspendedJobSets (KEP-1150): each container and init container of
    ``target`` takes the ``resources.requests`` and ``resources.limits`` of the container of the
    same name in ``source``, so only they may differ. ``resources.claims`` and every other field
    stay compared; a container added, removed or renamed has no match and is still refused."""
    source_pod = _pod_spec_of(source)
    target_pod = _pod_spec_of(target)
    for key in _CONTAINER_LISTS:
        old_containers = {
            container.get("name"): container
            for container in source_pod.get(key) or ()
            if isinstance(container, dict)
        }
        for container in target_pod.get(key) or ():
            old_container = old_containers.get(container.get("name"))
            if isinstance(container, dict) and old_container is not None:
                for field in _MUTABLE_RESOURCE_FIELDS:
                    _copy_path(old_container, container, ("resources", field))


def _pod_spec_of(rjob_view: dict[str, Any]) -> dict[str, Any]:
    template = (rjob_view.get("template") or {}).get("spec") or {}
    pod_spec = (template.get("template") or {}).get("spec")
    return pod_spec if isinstance(pod_spec, dict) else {}


def _is_indexed(rjob: ReplicatedJob) -> bool:
    return effective_completion_mode(rjob.template.spec) == INDEXED_COMPLETION


def _is_terminal(js: JobSet) -> bool:
    return any(
        condition.type in (ConditionType.COMPLETED, ConditionType.FAILED)
        and condition.status == ConditionStatus.TRUE
        for condition in js.status.conditions
    )


def _check_elastic_changes(old: JobSet, new: JobSet) -> list[FieldError]:
    old_by_name = {rjob.name: rjob for rjob in old.spec.replicated_jobs}
    errors: list[FieldError] = []
    terminal = _is_terminal(old)
    for index, rjob in enumerate(new.spec.replicated_jobs):
        old_rjob = old_by_name.get(rjob.name)
        if old_rjob is None or not _is_indexed(rjob):
            continue
        errors += _check_elastic_change(
            f"{_rjob_path(index)}.template.spec", rjob, old_rjob, terminal
        )
    return errors


def _check_elastic_change(
    path: str, new: ReplicatedJob, old: ReplicatedJob, terminal: bool
) -> list[FieldError]:
    new_spec, old_spec = new.template.spec, old.template.spec
    parallelism_changed = new_spec.parallelism != old_spec.parallelism
    completions_changed = new_spec.completions != old_spec.completions
    if not (parallelism_changed or completions_changed):
        return []
    if terminal:
        return [FieldError(path, "Forbidden", ELASTIC_TERMINAL_STATE)]
    parallelism, completions = new_spec.parallelism, new_spec.completions
    errors: list[FieldError] = []
    if parallelism_changed and parallelism is not None and parallelism < 1:
        errors.append(
            FieldError(f"{path}.parallelism", "Invalid", ELASTIC_PARALLELISM_BELOW_ONE, parallelism)
        )
    if completions_changed and completions is not None and completions < 1:
        errors.append(
            FieldError(f"{path}.completions", "Invalid", ELASTIC_COMPLETIONS_BELOW_ONE, completions)
        )
    if parallelism is not None and completions is not None and parallelism != completions:
        errors.append(FieldError(f"{path}.completions", "Invalid", ELASTIC_NOT_EQUAL, completions))
    return errors


def _copy_path(source: dict[str, Any], target: dict[str, Any], path: tuple[str, ...]) -> None:
    """Set ``target`` at ``path`` to ``source``'s value there (absent in ``source`` -> removed)."""
    *parents, leaf = path
    for key in parents:
        source = source.get(key) or {}
        target = target.setdefault(key, {})
    if leaf in source:
        target[leaf] = source[leaf]
    else:
        target.pop(leaf, None)


def _semantic_form(value: object) -> object:
    """``value`` without nulls, empty lists and empty maps: what Go's semantic equality sees."""
    if isinstance(value, dict):
        pruned = {key: _semantic_form(item) for key, item in value.items()}
        return {key: item for key, item in pruned.items() if item not in (None, [], {})}
    if isinstance(value, list):
        return [_semantic_form(item) for item in value]
    return value
