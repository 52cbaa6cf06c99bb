"""The words of the contract: condition reasons and messages, event reasons.

See docs/behaviour.md#conditions, #events.

Users, Kueue and dashboards match on these strings, so they are spelled exactly as upstream spells
them and live in one place. The last block holds the few words this controller adds for cases the
upstream controller turns into a reconcile error or does not have (see the package docstring).

``EVENT_TYPE_OF_CONDITION`` is the event-type column of the condition catalogue as a table: the
event for a condition change is Normal or Warning depending only on its type and status.

Reconcile puts these words into a Plan; the executor and the controller glue use the same names
for the events they emit themselves, so no event reason or message is spelled anywhere else.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from jobset_controller.api import ConditionType

# The two event types the events API accepts; a type, so a third cannot be written by mistake.
EventType = Literal["Normal", "Warning"]
NORMAL: Final[EventType] = "Normal"
WARNING: Final[EventType] = "Warning"

# --- conditions (docs/behaviour.md#condition-catalogue) ----------------------------------------

ALL_JOBS_COMPLETED_REASON: Final = "AllJobsCompleted"
ALL_JOBS_COMPLETED_MESSAGE: Final = "jobset completed successfully"

FAILED_JOBS_REASON: Final = "FailedJobs"
FAILED_JOBS_MESSAGE: Final = "jobset failed due to one or more job failures"
FAIL_JOBSET_ACTION_REASON: Final = "FailJobSetFailurePolicyAction"
FAIL_JOBSET_ACTION_MESSAGE: Final = "applying FailJobSet failure policy action"
REACHED_MAX_RESTARTS_REASON: Final = "ReachedMaxRestarts"
REACHED_MAX_RESTARTS_MESSAGE: Final = "jobset failed due to reaching max number of restarts"

# Failed=True when spec.activeDeadlineSeconds has passed since status.startTime (KEP-1186, gate
# JobSetActiveDeadlineSeconds). Ahead of upstream: the words of its open pull request, the same
# reason a batch/v1 Job fails with, so one alert rule matches both.
DEADLINE_EXCEEDED_REASON: Final = "DeadlineExceeded"


def deadline_exceeded_message(seconds: int) -> str:
    """The Failed message of a JobSet whose active deadline of ``seconds`` passed."""
    return f"JobSet was active for longer than the specified deadline of {seconds} seconds"


SUSPENDED_JOBS_REASON: Final = "SuspendedJobs"
SUSPENDED_JOBS_MESSAGE: Final = "jobset is suspended"
RESUME_JOBS_REASON: Final = "ResumeJobs"
RESUME_JOBS_MESSAGE: Final = "jobset is resumed"

# RestartingJobSet=True: the reason names the matched rule, or the default when none matched.
FAILURE_POLICY_REASON_PREFIX: Final = "FailurePolicy_"
DEFAULT_FAILURE_POLICY_REASON: Final = "DefaultFailurePolicy"
RESTART_JOBSET_ACTION_MESSAGE: Final = "applying RestartJobSet failure policy action"
RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE: Final = (
    "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"
)
RESTART_JOB_ACTION_MESSAGE: Final = "applying RestartJob failure policy action"
RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE: Final = (
    "applying RestartJobAndIgnoreMaxRestarts failure policy action"
)

# RestartingJobSet=False, each when the restart is over for another reason.
JOBS_READY_REASON: Final = "JobsReady"
JOBS_READY_MESSAGE: Final = "all jobs are ready"
JOBSET_FAILED_REASON: Final = "JobSetFailed"
JOBSET_FAILED_MESSAGE: Final = "jobset failed"
JOBSET_COMPLETED_REASON: Final = "JobSetCompleted"
JOBSET_COMPLETED_MESSAGE: Final = "jobset completed successfully"
JOBSET_SUSPENDED_REASON: Final = "JobSetSuspended"
JOBSET_SUSPENDED_MESSAGE: Final = "jobset is suspended"

IN_ORDER_STARTUP_POLICY_IN_PROGRESS_REASON: Final = "InOrderStartupPolicyInProgress"
IN_ORDER_STARTUP_POLICY_IN_PROGRESS_MESSAGE: Final = "in order startup policy is in progress"
IN_ORDER_STARTUP_POLICY_COMPLETED_REASON: Final = "InOrderStartupPolicyCompleted"
IN_ORDER_STARTUP_POLICY_COMPLETED_MESSAGE: Final = "in order startup policy has completed"

# --- events not tied to conditions (docs/behaviour.md#events) ----------------------------------

RESTART_JOBSET_ACTION_EVENT: Final = "RestartJobSetFailurePolicyAction"
RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT: Final = (
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
)
RESTART_JOB_ACTION_EVENT: Final = "RestartJobFailurePolicyAction"
RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT: Final = (
    "RestartJobAndIgnoreMaxRestartsFailurePolicyAction"
)
# Emitted by the executor at once (not gated on the status write) when a write fails. The note of
# JobCreationFailed is one ``job_creation_failed_message`` line per refused Job; the other two
# carry the API server's message as it is.
JOB_CREATION_FAILED_EVENT: Final = "JobCreationFailed"
HEADLESS_SERVICE_CREATION_FAILED_EVENT: Final = "HeadlessServiceCreationFailed"
PVC_CREATION_FAILED_EVENT: Final = "PVCCreationFailed"

# --- ours: where upstream returns a reconcile error or has no behaviour -----------------------

# Condition Failed=True (and its Warning event) for a JobSet that bypassed admission.
VALIDATION_FAILED_REASON: Final = "ValidationFailed"
VALIDATION_FAILED_MESSAGE: Final = "jobset is invalid"
# Condition Failed=True for failurePolicy.restartStrategy InPlaceRestart with the gate off.
IN_PLACE_RESTART_NOT_SUPPORTED_REASON: Final = "InPlaceRestartNotSupported"
IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE: Final = (
    "the InPlaceRestart restart strategy needs the InPlaceRestart feature gate"
)
# Warning events (at once) of the in-place pass where upstream returns a reconcile error
# (reconcile.in_place_restart); the pod's or the JobSet's next change wakes the JobSet again.
INVALID_IN_PLACE_RESTART_ATTEMPT_EVENT: Final = "InvalidInPlaceRestartAttempt"
IN_PLACE_RESTART_MISCONFIGURED_EVENT: Final = "InPlaceRestartMisconfigured"
# Warning event (at once) when the API server refuses a resume that carries container resources
# (MutablePodResourcesForSuspendedJobSets): KEP-1150's wording. The usual cause is a cluster
# without Kubernetes' MutablePodResourcesForSuspendedJobs gate (KEP-5440; beta, on, in 1.36).
FAILED_RESOURCE_PROPAGATION_EVENT: Final = "FailedResourcePropagation"


def failed_resource_propagation_message(error: str) -> str:
    """The note of FailedResourcePropagation for the API server's message ``error``."""
    return (
        f"Failed to propagate mutated resources to child Job: {error}. "
        "Ensure MutablePodResourcesForSuspendedJobs is enabled on the API server."
    )


# Gang scheduling (KEP-969, JobSetWorkloadAwareSchedulingAPI): a Warning event (at once) when the
# API server does not serve scheduling.k8s.io/v1beta1 Workloads and PodGroups (Kubernetes < 1.37,
# or the GenericWorkload gate / the v1beta1 runtime-config off). The Jobs are still created and
# their pods schedule one by one; nothing is retried against the missing API.
WORKLOAD_API_UNAVAILABLE_EVENT: Final = "WorkloadAPIUnavailable"
WORKLOAD_API_UNAVAILABLE_MESSAGE: Final = (
    "spec.scheduling is set but the API server does not serve scheduling.k8s.io/v1beta1 "
    "Workloads and PodGroups (Kubernetes >= 1.37 with the GenericWorkload feature gate and "
    "--runtime-config=scheduling.k8s.io/v1beta1=true); pods are scheduled without gangs"
)
# Warning event (executor) when a Workload or PodGroup cannot be created, patched or deleted.
WORKLOAD_CREATION_FAILED_EVENT: Final = "WorkloadCreationFailed"
POD_GROUP_CREATION_FAILED_EVENT: Final = "PodGroupCreationFailed"
# Warning event (at once) while kube-scheduler reports a PodGroup of the JobSet unschedulable
# (its PodGroupInitiallyScheduled condition False with reason Unschedulable): without it, a gang
# that does not fit leaves every pod Pending and the JobSet silent, the reason only on a PodGroup
# users never look at. The recorder keys Events by their note, so each distinct scheduler message
# is one Event and a repeat of the same message only counts in its series.
POD_GROUP_UNSCHEDULABLE_EVENT: Final = "PodGroupUnschedulable"


def pod_group_unschedulable_message(pod_group: str, scheduler_message: str) -> str:
    """The note of PodGroupUnschedulable: which PodGroup, and the scheduler's own words."""
    return f"PodGroup {pod_group} cannot be scheduled: {scheduler_message or 'no reason given'}"


# Warning event (at once) when a resume has waited long for a PodGroup of the JobSet that is still
# Terminating: on Kubernetes 1.37 its podgroup-protection finalizer keeps it while a pod names it,
# and new pods would join the old object, so the resume is held until it is gone. A wait of a
# pod's grace period is normal and said nothing about; a long one usually means kube-controller-
# manager's podgroup-protection-controller is not running. The note is the same on every pass
# (the deletion time, not the time waited), so the recorder folds it into one Event's series.
RESUME_WAITS_FOR_POD_GROUP_EVENT: Final = "ResumeWaitsForPodGroup"


def resume_waits_for_pod_group_message(pod_groups: str, since: str) -> str:
    """The note of ResumeWaitsForPodGroup: which PodGroups, since when, and who frees them."""
    return (
        f"Resume is held until PodGroup {pod_groups} (Terminating since {since}) is deleted: new "
        "pods would join the old group. kube-controller-manager's podgroup-protection-controller "
        "removes its finalizer once no pod names it"
    )


# Normal event (the controller, after the pass that saw it) when a whole-JobSet restart is over:
# every Job of the new attempt ready. Its note is the restart's timeline (controller.
# restart_timeline), what `jobset-controller status` shows of past restarts.
RESTART_COMPLETED_EVENT: Final = "RestartCompleted"
# The phases a restart's timeline names, in order, with the words its note uses for each.
RESTART_PHASE_WORDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "detect": "failure seen",
        "teardown": "old Jobs gone",
        "create": "new Jobs created",
        "ready": "all Jobs ready",
    }
)


def restart_completed_message(
    *, attempt: int, action: str, job: str, reason: str, took: Mapping[str, float], total: float
) -> str:
    """The RestartCompleted note: which restart, why, and each phase's seconds."""
    cause = f"{action or 'restart'}"
    if job:
        cause += f" after {job} failed" + (f" ({reason})" if reason else "")
    phases = ", ".join(
        f"{words} +{took[phase]:.1f}s"
        for phase, words in RESTART_PHASE_WORDS.items()
        if phase in took
    )
    return f"restart {attempt} ({cause}) completed in {total:.1f}s: {phases}"


# Warning events of a pass that writes nothing (upstream: a reconcile error, retried).
INVALID_CHILD_JOB_EVENT: Final = "InvalidChildJob"
FEATURE_GATE_DISABLED_EVENT: Final = "FeatureGateDisabled"
RESTART_JOB_TOO_MANY_REPLICAS_EVENT: Final = "RestartJobTooManyReplicas"
# Warning event of a JobSet the controller cannot parse (the controller glue emits it, no retry).
INVALID_JOBSET_EVENT: Final = "InvalidJobSet"

# The apiserver's limit on metav1.Condition.message.
MAX_CONDITION_MESSAGE_BYTES: Final = 32768

# (condition type, status) -> event type of a change to it (docs/behaviour.md#condition-catalogue).
EVENT_TYPE_OF_CONDITION: Final[Mapping[tuple[str, bool], EventType]] = MappingProxyType(
    {
        (ConditionType.COMPLETED, True): NORMAL,
        (ConditionType.FAILED, True): WARNING,
        (ConditionType.SUSPENDED, True): NORMAL,
        (ConditionType.SUSPENDED, False): NORMAL,
        (ConditionType.RESTARTING_JOBSET, True): WARNING,
        (ConditionType.RESTARTING_JOBSET, False): NORMAL,
        (ConditionType.STARTUP_POLICY_IN_PROGRESS, True): NORMAL,
        (ConditionType.STARTUP_POLICY_COMPLETED, True): NORMAL,
    }
)


def with_first_failed_job(message: str, job_name: str) -> str:
    """``<message> (first failed job: <job>)``, the suffix upstream puts on failure messages."""
    return f"{message} (first failed job: {job_name})"


def job_creation_failed_message(job_name: str, error: str) -> str:
    """One line of the JobCreationFailed event note; the executor joins one line per Job."""
    return f'job "{job_name}" creation failed with error: {error}'


def invalid_in_place_attempt_message(pod_name: str) -> str:
    """The InvalidInPlaceRestartAttempt note: upstream's error text, with the pod named."""
    return (
        f"pod {pod_name}: invalid value for annotation jobset.sigs.k8s.io/in-place-restart-attempt"
        ", must be non-negative integer"
    )


def in_place_misconfigured_message(rjob_name: str) -> str:
    """The InPlaceRestartMisconfigured note: upstream's error text."""
    return (
        f"{rjob_name}: in-place restart requires jobTemplate.spec.completions == "
        "jobTemplate.spec.parallelism != nil"
    )


def invalid_jobset_message(problem: str) -> str:
    """The InvalidJobSet event note: the first thing the parser could not accept."""
    return f"cannot read JobSet: {problem}"


# Why a JobSet without replicatedJobs fails (ValidationFailed): the CRD admits it, but there is
# nothing to run and replicatedJobs are immutable, so it could otherwise only sit without status.
NO_REPLICATED_JOBS_MESSAGE: Final = "jobset has no replicatedJobs, so there is nothing to run"


# --- the pod controller (docs/behaviour.md#exclusive-placement) --------------------------------

# The condition put on a misplaced follower before it is deleted (upstream's words), so a
# podFailurePolicy can tell this deletion from a real failure.
DISRUPTION_TARGET_CONDITION: Final = "DisruptionTarget"
EXCLUSIVE_PLACEMENT_VIOLATION_REASON: Final = "ExclusivePlacementViolation"
EXCLUSIVE_PLACEMENT_VIOLATION_MESSAGE: Final = "Pod violated JobSet exclusive placement policy"
# Ours: Warning events on a leader whose domain cannot be read, so followers waiting for it (a
# gate, or upstream's rejected creates) are never held without a visible reason.
LEADER_NODE_NOT_FOUND_EVENT: Final = "ExclusivePlacementLeaderNodeNotFound"
LEADER_NODE_WITHOUT_TOPOLOGY_EVENT: Final = "ExclusivePlacementTopologyMissing"
# Normal event on a follower released from its gate.
FOLLOWER_PLACED_EVENT: Final = "ExclusivePlacementFollowerPlaced"


# --- pods on unreachable nodes (docs/behaviour.md#pods-on-unreachable-nodes) -------------------

# Warning event, one per pod, regarding the pod's JobSet: a pod stuck terminating on a dead node
# was force-deleted (reconcile.stuck_pods). The DisruptionTarget condition written on the pod just
# before says the same, for a pod failure policy and for whoever reads the pod's last state.
POD_FORCE_DELETED_EVENT: Final = "PodForceDeletedOnUnreachableNode"
DELETION_BY_JOBSET_CONTROLLER_REASON: Final = "DeletionByJobSetController"


def pod_force_deleted_message(pod: str, node: str, taint: str, since: str) -> str:
    """The note of PodForceDeletedOnUnreachableNode and the DisruptionTarget message."""
    return (
        f"pod {pod} was terminating since {since} on node {node}, which is tainted {taint} (its "
        "kubelet cannot confirm the end); force-deleted so that its Job, and the JobSet's next "
        "attempt, are not held by it"
    )


def leader_node_not_found_message(node: str) -> str:
    return (
        f"node {node} of this leader pod does not exist; its followers wait until the Job "
        "controller replaces this pod"
    )


def leader_node_without_topology_message(node: str, key: str) -> str:
    return (
        f"node {node} of this leader pod has no label {key}; its followers wait until the node "
        "is labelled"
    )


def follower_placed_message(key: str, domain: str) -> str:
    return f"leader bound: nodeSelector {key}={domain} set and scheduling gate removed"
