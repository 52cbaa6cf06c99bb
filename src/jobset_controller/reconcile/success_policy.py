"""When a JobSet succeeds (docs/behaviour.md#success-policy).

Evaluated only when the current attempt has succeeded Jobs and no failed ones. A succeeded Job
counts when it belongs to a targeted replicatedJob (no targets: every Job counts). ``Any`` needs
one such Job; ``All`` needs as many as the targeted replicatedJobs have replicas. So a JobSet with
no Jobs never completes. A missing success policy reads as ``All`` (admission always sets one;
upstream would crash without it).
"""

from collections.abc import Sequence

from jobset_controller.api import REPLICATED_JOB_NAME_KEY, Operator, ReplicatedJob, SuccessPolicy
from jobset_controller.reconcile.jobs import Job, labels_of

DEFAULT_SUCCESS_POLICY = SuccessPolicy(operator=Operator.ALL)


def job_matches_success_policy(policy: SuccessPolicy, job: Job) -> bool:
    """The succeeded ``job`` counts towards ``policy``."""
    targets = policy.target_replicated_jobs
    return not targets or labels_of(job).get(REPLICATED_JOB_NAME_KEY) in targets


def num_jobs_expected_to_succeed(policy: SuccessPolicy, rjobs: Sequence[ReplicatedJob]) -> int:
    """1 for Any; for All, the replicas of the targeted replicatedJobs (all when untargeted)."""
    if policy.operator == Operator.ANY:
        return 1
    targets = policy.target_replicated_jobs
    return sum(rjob.replicas for rjob in rjobs if not targets or rjob.name in targets)


def success_policy_is_met(
    policy: SuccessPolicy | None, rjobs: Sequence[ReplicatedJob], succeeded: Sequence[Job]
) -> bool:
    """Enough ``succeeded`` Jobs match ``policy`` (None reads as All) to complete the JobSet."""
    policy = DEFAULT_SUCCESS_POLICY if policy is None else policy
    matching = sum(1 for job in succeeded if job_matches_success_policy(policy, job))
    return matching >= num_jobs_expected_to_succeed(policy, rjobs)
