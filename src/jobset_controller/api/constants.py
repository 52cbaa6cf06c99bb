"""Names that are part of the JobSet wire contract, spelled exactly as upstream spells them.

Why a module of its own: label keys, enum values and reasons are read by kubectl, Kueue and
tools written for the upstream Go controller. A typo here silently breaks them, so every string
of the contract lives in one place (spec sections 0, 1.2, 2.2, 2.3) and everything else imports
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

# The reserved spec.managedBy value meaning "the built-in controller" (spec 2.4, 3.8).
JOBSET_CONTROLLER_NAME: Final = "jobset.sigs.k8s.io/jobset-controller"

# Labels AND annotations written on child Jobs and their pod templates (spec 2.2).
JOBSET_NAME_KEY: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY: Final = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_KEY: Final = "jobset.sigs.k8s.io/replicatedjob-name"
RESTARTS_KEY: Final = "jobset.sigs.k8s.io/restart-attempt"
JOB_RESTART_ATTEMPT_KEY: Final = "jobset.sigs.k8s.io/job-restart-attempt"
REPLICATED_JOB_REPLICAS_KEY: Final = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_KEY: Final = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-index"
JOB_KEY: Final = "jobset.sigs.k8s.io/job-key"
JOB_GLOBAL_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-global-index"
GROUP_NAME_KEY: Final = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_KEY: Final = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_KEY: Final = "jobset.sigs.k8s.io/job-group-index"
COORDINATOR_KEY: Final = "jobset.sigs.k8s.io/coordinator"

# Exclusive placement: annotations only, never labels (spec 2.2, 3.10).
EXCLUSIVE_KEY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY_KEY: Final = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB_KEY: Final = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT_KEY: Final = "alpha.jobset.sigs.k8s.io/no-schedule"

# Written on Pods by the pod webhook or by the in-place restart agent (spec 2.3).
PRIORITY_KEY: Final = "jobset.sigs.k8s.io/priority"
IN_PLACE_RESTART_ATTEMPT_KEY: Final = "jobset.sigs.k8s.io/in-place-restart-attempt"
DISABLE_IN_PLACE_RESTART_KEY: Final = "jobset.sigs.k8s.io/disable-in-place-restart"

# Values of the embedded batch/v1 and core/v1 types that JobSet defaults or checks (spec 1.4, 1.5).
INDEXED_COMPLETION: Final = "Indexed"
NON_INDEXED_COMPLETION: Final = "NonIndexed"
RESTART_POLICY_ON_FAILURE: Final = "OnFailure"
POD_REPLACEMENT_POLICY_FAILED: Final = "Failed"
MAX_INT32: Final = 2_147_483_647

# Upstream's unused restart reason, kept because it is part of the published constants (spec 2.4).
JOBSET_RESTART_REASON: Final = "Restarting"


class FailurePolicyAction(StrEnum):
    """What the controller does when a failure policy rule matches a failed Job (spec 1.2)."""

    FAIL_JOBSET = "FailJobSet"
    RESTART_JOBSET = "RestartJobSet"
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS = "RestartJobSetAndIgnoreMaxRestarts"
    RESTART_JOB = "RestartJob"
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS = "RestartJobAndIgnoreMaxRestarts"


class RestartStrategy(StrEnum):
    """How a global restart is carried out (spec 1.2, failurePolicy.restartStrategy)."""

    RECREATE = "Recreate"
    BLOCKING_RECREATE = "BlockingRecreate"
    IN_PLACE_RESTART = "InPlaceRestart"


class StartupPolicyOrder(StrEnum):
    """Deprecated startup ordering of replicatedJobs (spec 1.2, StartupPolicy)."""

    ANY_ORDER = "AnyOrder"
    IN_ORDER = "InOrder"


class Operator(StrEnum):
    """Success policy operator: all targeted replicatedJobs, or any one of them (spec 1.2)."""

    ALL = "All"
    ANY = "Any"


class DependsOnStatus(StrEnum):
    """The state a dependency must reach before a dependent replicatedJob starts (spec 1.2)."""

    READY = "Ready"
    COMPLETE = "Complete"


class RetentionWhenDeleted(StrEnum):
    """What happens to PVCs created from volumeClaimPolicies when the JobSet goes (spec 1.2)."""

    DELETE = "Delete"
    RETAIN = "Retain"


class ConditionType(StrEnum):
    """Condition types the controller writes on a JobSet (spec 4.2)."""

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
    """Values of status.terminalState once a JobSet has finished (spec 1.3); empty before."""

    COMPLETED = "Completed"
    FAILED = "Failed"


class JobFailureReason(StrEnum):
    """Job failure reasons a failure policy rule may name in onJobFailureReasons (spec 1.2)."""

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
