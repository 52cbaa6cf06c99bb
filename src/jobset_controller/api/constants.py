"""Names that are part of the JobSet wire contract, spelled exactly as upstream spells them.

Why a module of its own: label keys, enum values and reasons are read by kubectl, Kueue and
tools written for the upstream Go controller. A typo here silently breaks them, so every string
of the contract lives in one place (docs/behaviour.md sections 1 and 3) and everything else imports
it instead of retyping it.

Enums are ``StrEnum``s: members compare equal to, and serialise as, the plain wire string.
"""

from enum import StrEnum
from typing import Final

GROUP: Final = "jobset.x-k8s.io"
VERSION: Final = "v1alpha2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "JobSet"
LIST_KIND: Final = "JobSetList"
PLURAL: Final = "jobsets"
SINGULAR: Final = "jobset"

# The field manager every write of the controller appears under in managedFields (JobSet status,
# Jobs, Services, Events, claims, pods, the webhook certificates), upstream's name for it: the API
# server names a write that carries no fieldManager after the first word of its User-Agent, and
# upstream's is `jobset/<version> (<os>/<arch>) <commit>` (its useragent.Default). One name on
# both sides keeps managedFields from growing a second owner of every field after a swap
# (docs/behaviour.md#field-manager).
FIELD_MANAGER: Final = "jobset"

# A replicatedJob's groupName when unset (the group-name label of its Jobs and pods).
DEFAULT_GROUP_NAME: Final = "default"

# The reserved spec.managedBy value meaning "this controller" (docs/behaviour.md#managed-by).
JOBSET_CONTROLLER_NAME: Final = "jobset.sigs.k8s.io/jobset-controller"

# Labels AND annotations on child Jobs and their pod templates (docs/behaviour.md#child-labels).
JOBSET_NAME_KEY: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY: Final = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_KEY: Final = "jobset.sigs.k8s.io/replicatedjob-name"
RESTARTS_KEY: Final = "jobset.sigs.k8s.io/restart-attempt"
JOB_RESTART_ATTEMPT_KEY: Final = "jobset.sigs.k8s.io/job-restart-attempt"
# ExecutionAttemptsTracking gate: status.executionAttempts of the run a Job (and its pods) is
# part of; an annotation only, on the Job and its pod template (KEP-1282).
EXECUTION_ATTEMPT_KEY: Final = "jobset.sigs.k8s.io/execution-attempt"
REPLICATED_JOB_REPLICAS_KEY: Final = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_KEY: Final = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-index"
JOB_KEY: Final = "jobset.sigs.k8s.io/job-key"
JOB_GLOBAL_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-global-index"
GROUP_NAME_KEY: Final = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_KEY: Final = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-group-index"
COORDINATOR_KEY: Final = "jobset.sigs.k8s.io/coordinator"

# Exclusive placement: annotations only, never labels (docs/behaviour.md#placement-annotations).
EXCLUSIVE_KEY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY_KEY: Final = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB_KEY: Final = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT_KEY: Final = "alpha.jobset.sigs.k8s.io/no-schedule"

# Written on Pods by the pod webhook or the in-place restart agent (docs/behaviour.md#pod-labels).
PRIORITY_KEY: Final = "jobset.sigs.k8s.io/priority"
IN_PLACE_RESTART_ATTEMPT_KEY: Final = "jobset.sigs.k8s.io/in-place-restart-attempt"
DISABLE_IN_PLACE_RESTART_KEY: Final = "jobset.sigs.k8s.io/disable-in-place-restart"

# Values of the embedded batch/v1 and core/v1 types that JobSet defaults or checks
# (docs/behaviour.md#defaults, #validation-create).
INDEXED_COMPLETION: Final = "Indexed"
RESTART_POLICY_ON_FAILURE: Final = "OnFailure"
POD_REPLACEMENT_POLICY_FAILED: Final = "Failed"
MAX_INT32: Final = 2_147_483_647


class FailurePolicyAction(StrEnum):
    """What a matching failure policy rule does (docs/behaviour.md#failure-actions)."""

    FAIL_JOBSET = "FailJobSet"
    RESTART_JOBSET = "RestartJobSet"
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS = "RestartJobSetAndIgnoreMaxRestarts"
    RESTART_JOB = "RestartJob"
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS = "RestartJobAndIgnoreMaxRestarts"


class RestartStrategy(StrEnum):
    """How a global restart is carried out (docs/behaviour.md#restarts)."""

    RECREATE = "Recreate"
    BLOCKING_RECREATE = "BlockingRecreate"
    IN_PLACE_RESTART = "InPlaceRestart"


class StartupPolicyOrder(StrEnum):
    """Deprecated startup ordering of replicatedJobs (docs/behaviour.md#startup-order)."""

    ANY_ORDER = "AnyOrder"
    IN_ORDER = "InOrder"


class Operator(StrEnum):
    """All targeted replicatedJobs, or any one of them (docs/behaviour.md#success-policy)."""

    ALL = "All"
    ANY = "Any"


class DependsOnStatus(StrEnum):
    """What a dependency must reach before its dependant starts (docs/behaviour.md#depends-on)."""

    READY = "Ready"
    COMPLETE = "Complete"


class RetentionWhenDeleted(StrEnum):
    """Whether volumeClaimPolicies PVCs outlive the JobSet (docs/behaviour.md#owned-objects)."""

    DELETE = "Delete"
    RETAIN = "Retain"


class ConditionType(StrEnum):
    """Condition types the controller writes on a JobSet (docs/behaviour.md#condition-catalogue)."""

    COMPLETED = "Completed"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    STARTUP_POLICY_IN_PROGRESS = "StartupPolicyInProgress"
    STARTUP_POLICY_COMPLETED = "StartupPolicyCompleted"
    RESTARTING_JOBSET = "RestartingJobSet"


class ConditionStatus(StrEnum):
    """metav1.Condition status values (an enum in the Condition schema)."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class TerminalState(StrEnum):
    """status.terminalState once a JobSet has finished, empty before (docs/behaviour.md#status)."""

    COMPLETED = "Completed"
    FAILED = "Failed"


class JobFailureReason(StrEnum):
    """Job failure reasons a rule's onJobFailureReasons may name (docs/behaviour.md#spec)."""

    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    FAILED_INDEXES = "FailedIndexes"
    MAX_FAILED_INDEXES_EXCEEDED = "MaxFailedIndexesExceeded"
    POD_FAILURE_POLICY = "PodFailurePolicy"


# Actions that need the RestartJob gate and bound every replicatedJob to MAX_JOB_RESTART_REPLICAS.
RESTART_JOB_ACTIONS: Final = frozenset(
    {FailurePolicyAction.RESTART_JOB, FailurePolicyAction.RESTART_JOB_AND_IGNORE_MAX_RESTARTS}
)
# status.replicatedJobsStatus[].jobRestarts has maxItems 1024, one entry per Job index.
MAX_JOB_RESTART_REPLICAS: Final = 1024
