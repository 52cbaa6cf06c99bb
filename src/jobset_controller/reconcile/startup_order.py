"""The deprecated InOrder startup policy (docs/behaviour.md#startup-order; superseded by dependsOn).

With ``startupPolicyOrder: InOrder`` the replicatedJobs start one after the other, in spec order:
the next one is created (or resumed) only once every Job of the previous one has "started", which
means ready or already finished (``ready + failed + succeeded == replicas``), not merely created.
While the JobSet is suspended InOrder does not gate creation: every Job is created, suspended.
Progress is reported with the mutually exclusive StartupPolicyInProgress/Completed conditions.
"""

from jobset_controller.api import (
    ConditionType,
    JobSet,
    StartupPolicyOrder,
)
from jobset_controller.reconcile.catalogue import (
    IN_ORDER_STARTUP_POLICY_COMPLETED_MESSAGE,
    IN_ORDER_STARTUP_POLICY_COMPLETED_REASON,
    IN_ORDER_STARTUP_POLICY_IN_PROGRESS_MESSAGE,
    IN_ORDER_STARTUP_POLICY_IN_PROGRESS_REASON,
)
from jobset_controller.reconcile.conditions import NewCondition
from jobset_controller.reconcile.counts import ReplicatedJobCounts

IN_PROGRESS = NewCondition(
    ConditionType.STARTUP_POLICY_IN_PROGRESS,
    True,
    IN_ORDER_STARTUP_POLICY_IN_PROGRESS_REASON,
    IN_ORDER_STARTUP_POLICY_IN_PROGRESS_MESSAGE,
)
COMPLETED = NewCondition(
    ConditionType.STARTUP_POLICY_COMPLETED,
    True,
    IN_ORDER_STARTUP_POLICY_COMPLETED_REASON,
    IN_ORDER_STARTUP_POLICY_COMPLETED_MESSAGE,
)


def starts_in_order(js: JobSet) -> bool:
    """The JobSet uses the InOrder startup policy."""
    policy = js.spec.startup_policy
    return policy is not None and policy.startup_policy_order == StartupPolicyOrder.IN_ORDER


def all_replicas_started(replicas: int, counts: ReplicatedJobCounts) -> bool:
    """Every Job of the replicatedJob is ready or finished."""
    return replicas == counts.started()
