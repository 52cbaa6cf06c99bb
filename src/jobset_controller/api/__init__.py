"""The JobSet v1alpha2 API as a plain Python SDK: models, defaulting, validation, constants.

Why a package of its own: the reconciler, the webhooks and the CLI all speak this API, and users can
build and check JobSets with it without a cluster. It imports nothing else of ours (the
`product-layers` import contract in pyproject.toml).

Typical use::

    from jobset_controller.api import JobSet, default_jobset, validate_create

    js = default_jobset(JobSet.model_validate(manifest))
    for error in validate_create(js):
        print(error)            # spec.replicatedJobs[0].groupName: Invalid value: ...
    manifest = js.to_dict()     # lossless: unknown fields survive
"""

import importlib
from typing import TYPE_CHECKING, Any, Final

from jobset_controller.api.constants import (
    API_VERSION,
    COORDINATOR_KEY,
    DISABLE_IN_PLACE_RESTART_KEY,
    EXCLUSIVE_KEY,
    EXECUTION_ATTEMPT_KEY,
    GLOBAL_REPLICAS_KEY,
    GROUP,
    GROUP_NAME_KEY,
    GROUP_REPLICAS_KEY,
    IN_PLACE_RESTART_ATTEMPT_KEY,
    JOB_GLOBAL_INDEX_KEY,
    JOB_GROUP_INDEX_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    JOBSET_CONTROLLER_NAME,
    JOBSET_NAME_KEY,
    JOBSET_UID_KEY,
    KIND,
    LIST_KIND,
    NAMESPACED_JOB_KEY,
    NO_SCHEDULE_TAINT_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    PLURAL,
    PRIORITY_KEY,
    REPLICATED_JOB_NAME_KEY,
    REPLICATED_JOB_REPLICAS_KEY,
    RESTARTS_KEY,
    SINGULAR,
    VERSION,
    ConditionStatus,
    ConditionType,
    DependsOnStatus,
    FailurePolicyAction,
    JobFailureReason,
    Operator,
    RestartStrategy,
    RetentionWhenDeleted,
    StartupPolicyOrder,
    TerminalState,
)
from jobset_controller.api.features import FeatureGates
from jobset_controller.api.field_errors import ErrorType, FieldError

if TYPE_CHECKING:
    from jobset_controller.api.crd_rules import (
        validate_crd_rules_on_create,
        validate_crd_rules_on_update,
    )
    from jobset_controller.api.defaults import apply_crd_defaults, default_jobset
    from jobset_controller.api.types import (
        Condition,
        Container,
        Coordinator,
        DependsOn,
        FailurePolicy,
        FailurePolicyRule,
        JobSet,
        JobSetSpec,
        JobSetStatus,
        JobSpec,
        JobTemplateSpec,
        Network,
        ObjectMeta,
        PersistentVolumeClaim,
        PodSpec,
        PodTemplateSpec,
        ReplicatedJob,
        ReplicatedJobStatus,
        RetentionPolicy,
        SchedulingGate,
        StartupPolicy,
        SuccessPolicy,
        Toleration,
        Volume,
        VolumeClaimPolicy,
        VolumeMount,
        WireModel,
    )
    from jobset_controller.api.validation import validate_create, validate_update

# The models and everything built on them are loaded on first use: pydantic and the models are
# most of this package's import time, and the controller's path from process start to /readyz
# needs none of them (it imports the constants; api/warmup.py loads the rest once it is ready).
# Each name here is also imported above for type checkers; a test resolves every one.
_LAZY: Final = {
    "validate_crd_rules_on_create": "crd_rules",
    "validate_crd_rules_on_update": "crd_rules",
    "apply_crd_defaults": "defaults",
    "default_jobset": "defaults",
    "Condition": "types",
    "Container": "types",
    "Coordinator": "types",
    "DependsOn": "types",
    "FailurePolicy": "types",
    "FailurePolicyRule": "types",
    "JobSet": "types",
    "JobSetSpec": "types",
    "JobSetStatus": "types",
    "JobSpec": "types",
    "JobTemplateSpec": "types",
    "Network": "types",
    "ObjectMeta": "types",
    "PersistentVolumeClaim": "types",
    "PodSpec": "types",
    "PodTemplateSpec": "types",
    "ReplicatedJob": "types",
    "ReplicatedJobStatus": "types",
    "RetentionPolicy": "types",
    "SchedulingGate": "types",
    "StartupPolicy": "types",
    "SuccessPolicy": "types",
    "Toleration": "types",
    "Volume": "types",
    "VolumeClaimPolicy": "types",
    "VolumeMount": "types",
    "WireModel": "types",
    "validate_create": "validation",
    "validate_update": "validation",
}


__all__ = [
    "API_VERSION",
    "COORDINATOR_KEY",
    "DISABLE_IN_PLACE_RESTART_KEY",
    "EXCLUSIVE_KEY",
    "EXECUTION_ATTEMPT_KEY",
    "GLOBAL_REPLICAS_KEY",
    "GROUP",
    "GROUP_NAME_KEY",
    "GROUP_REPLICAS_KEY",
    "IN_PLACE_RESTART_ATTEMPT_KEY",
    "JOBSET_CONTROLLER_NAME",
    "JOBSET_NAME_KEY",
    "JOBSET_UID_KEY",
    "JOB_GLOBAL_INDEX_KEY",
    "JOB_GROUP_INDEX_KEY",
    "JOB_INDEX_KEY",
    "JOB_KEY",
    "JOB_RESTART_ATTEMPT_KEY",
    "KIND",
    "LIST_KIND",
    "NAMESPACED_JOB_KEY",
    "NODE_SELECTOR_STRATEGY_KEY",
    "NO_SCHEDULE_TAINT_KEY",
    "PLURAL",
    "PRIORITY_KEY",
    "REPLICATED_JOB_NAME_KEY",
    "REPLICATED_JOB_REPLICAS_KEY",
    "RESTARTS_KEY",
    "SINGULAR",
    "VERSION",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "Container",
    "Coordinator",
    "DependsOn",
    "DependsOnStatus",
    "ErrorType",
    "FailurePolicy",
    "FailurePolicyAction",
    "FailurePolicyRule",
    "FeatureGates",
    "FieldError",
    "JobFailureReason",
    "JobSet",
    "JobSetSpec",
    "JobSetStatus",
    "JobSpec",
    "JobTemplateSpec",
    "Network",
    "ObjectMeta",
    "Operator",
    "PersistentVolumeClaim",
    "PodSpec",
    "PodTemplateSpec",
    "ReplicatedJob",
    "ReplicatedJobStatus",
    "RestartStrategy",
    "RetentionPolicy",
    "RetentionWhenDeleted",
    "SchedulingGate",
    "StartupPolicy",
    "StartupPolicyOrder",
    "SuccessPolicy",
    "TerminalState",
    "Toleration",
    "Volume",
    "VolumeClaimPolicy",
    "VolumeMount",
    "WireModel",
    "apply_crd_defaults",
    "default_jobset",
    "validate_crd_rules_on_create",
    "validate_crd_rules_on_update",
    "validate_create",
    "validate_update",
]


if not TYPE_CHECKING:  # type checkers see the imports above instead, so a typo stays an error

    def __getattr__(name: str) -> Any:
        """PEP 562: the first use of a model name imports its module (then it is a plain global)."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value
