"""The labels and annotations every child Job and its pod template carry.

See docs/behaviour.md#child-labels.

The same key/value set is written as labels AND as annotations, on the Job and on its pod template
(so Pods inherit it). Indices count Jobs across the JobSet: the global index runs over all
replicatedJobs in spec order, the group index over the replicatedJobs sharing a ``groupName``.
Exclusive-placement keys are annotations only; they come from the JobSet's metadata or, winning
over it, from the replicatedJob's Job template metadata.
"""

from collections.abc import Mapping

from jobset_controller.api import (
    COORDINATOR_KEY,
    EXCLUSIVE_KEY,
    GLOBAL_REPLICAS_KEY,
    GROUP_NAME_KEY,
    GROUP_REPLICAS_KEY,
    JOB_GLOBAL_INDEX_KEY,
    JOB_GROUP_INDEX_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    JOBSET_NAME_KEY,
    JOBSET_UID_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    REPLICATED_JOB_NAME_KEY,
    REPLICATED_JOB_REPLICAS_KEY,
    RESTARTS_KEY,
    JobSet,
    ReplicatedJob,
)
from jobset_controller.api.naming import job_key, job_name, jobset_coordinator_endpoint


def global_replicas(js: JobSet) -> int:
    """Jobs in the whole JobSet: the sum of all replicas."""
    return sum(rjob.replicas for rjob in js.spec.replicated_jobs)


def global_job_index(js: JobSet, rjob_name: str, job_index: int) -> int:
    """Replicas of the replicatedJobs before ``rjob_name`` in spec order, plus ``job_index``."""
    offset = 0
    for rjob in js.spec.replicated_jobs:
        if rjob.name == rjob_name:
            break
        offset += rjob.replicas
    return offset + job_index


def group_replicas(js: JobSet, group_name: str) -> int:
    """Jobs in one group: the sum of replicas of the replicatedJobs with that groupName."""
    return sum(rjob.replicas for rjob in js.spec.replicated_jobs if rjob.group_name == group_name)


def group_job_index(js: JobSet, rjob: ReplicatedJob, job_index: int) -> int:
    """Replicas of earlier replicatedJobs of the same group, plus ``job_index``."""
    offset = 0
    for other in js.spec.replicated_jobs:
        if other.name == rjob.name:
            break
        if other.group_name == rjob.group_name:
            offset += other.replicas
    return offset + job_index


def child_labels(
    js: JobSet,
    rjob: ReplicatedJob,
    job_index: int,
    *,
    restarts: int,
    job_restart_attempt: int | None,
) -> dict[str, str]:
    """The key/value set written as labels and annotations on a Job and its pod template.

    Args:
        js: The (defaulted) JobSet.
        rjob: The replicatedJob the Job belongs to.
        job_index: The Job's index within the replicatedJob.
        restarts: ``status.restarts`` when the Job is created.
        job_restart_attempt: RestartJob gate: ``jobRestarts[job_index]``; None without the gate.
    """
    name = js.metadata.name or ""
    namespace = js.metadata.namespace or ""
    values = {
        JOBSET_NAME_KEY: name,
        JOBSET_UID_KEY: js.metadata.uid or "",
        REPLICATED_JOB_NAME_KEY: rjob.name,
        RESTARTS_KEY: str(restarts),
        REPLICATED_JOB_REPLICAS_KEY: str(rjob.replicas),
        GLOBAL_REPLICAS_KEY: str(global_replicas(js)),
        JOB_INDEX_KEY: str(job_index),
        JOB_KEY: job_key(namespace, job_name(name, rjob.name, job_index)),
        JOB_GLOBAL_INDEX_KEY: str(global_job_index(js, rjob.name, job_index)),
        GROUP_NAME_KEY: rjob.group_name,
        GROUP_REPLICAS_KEY: str(group_replicas(js, rjob.group_name)),
        JOB_GROUP_INDEX_KEY: str(group_job_index(js, rjob, job_index)),
    }
    if job_restart_attempt is not None:
        values[JOB_RESTART_ATTEMPT_KEY] = str(job_restart_attempt)
    coordinator = jobset_coordinator_endpoint(js)
    if coordinator is not None:
        values[COORDINATOR_KEY] = coordinator
    return values


def exclusive_annotations(js: JobSet, rjob: ReplicatedJob) -> dict[str, str]:
    """Exclusive-placement annotations for the Job and its pod template.

    The node-selector flag is copied only from a level that also has the exclusive annotation;
    the replicatedJob level (its Job template's annotations) overrides the JobSet level.
    """
    # Both keys come from ONE level: the replicatedJob's when it has the exclusive annotation,
    # else the JobSet's. Mixing levels could turn on the node-selector strategy for a
    # replicatedJob that asked for the affinity one.
    return _exclusive_keys_of(rjob.template.metadata.annotations) or _exclusive_keys_of(
        js.metadata.annotations
    )


def _exclusive_keys_of(annotations: Mapping[str, str]) -> dict[str, str]:
    if EXCLUSIVE_KEY not in annotations:
        return {}
    out = {EXCLUSIVE_KEY: annotations[EXCLUSIVE_KEY]}
    if NODE_SELECTOR_STRATEGY_KEY in annotations:
        out[NODE_SELECTOR_STRATEGY_KEY] = annotations[NODE_SELECTOR_STRATEGY_KEY]
    return out
