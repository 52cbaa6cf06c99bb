"""Deferred children, the Configuration's ``deferredChildren.enable``.

See docs/behaviour.md#deferred-children.

A JobSet that is suspended and has never run is, to everything that reads it, a JobSet whose Jobs
exist and are suspended: upstream creates them at once, suspended, with the headless Service.
Under a queue (Kueue) that is one Job per replica and a Service per JobSet kept in etcd and in
every Job informer of the cluster, for JobSets that may wait for hours. With the option on, such
a JobSet gets no Jobs and no Service; its status is what those suspended Jobs would give
(``replicatedJobsStatus[].suspended``, the Suspended condition), and the first resume creates the
Jobs straight from the current spec (with what Kueue wrote into it on admission), running, plus
the Service. Startup order, dependsOn, exclusive placement and execution attempts then proceed as
for any JobSet created running.

"Never ran" is read from what a JobSet that ran always leaves behind: a child Job (even a
previous attempt's), a restart, or (with ExecutionAttemptsTracking) an execution attempt. So a
JobSet that ran and was suspended again keeps its Jobs and is suspended the usual way, and turning
the option off gives every deferred JobSet its suspended Jobs and Service at its next pass.
"""

from jobset_controller.reconcile.counts import ReplicatedJobCounts, job_is_ready
from jobset_controller.reconcile.depends_on import dependencies_are_reached
from jobset_controller.reconcile.snapshot import Snapshot
from jobset_controller.reconcile.view import JobSetView


def children_are_deferred(snapshot: Snapshot, view: JobSetView) -> bool:
    """The option is on, and the JobSet is suspended and has never run."""
    status = view.jobset.status
    return (
        snapshot.defer_children
        and view.suspended
        and not snapshot.jobs
        and status.restarts == 0
        and status.execution_attempts is None
    )


def deferred_counts(view: JobSetView) -> tuple[ReplicatedJobCounts, ...]:
    """``replicatedJobsStatus`` as the suspended Jobs upstream would have created would give it.

    While suspended every replicatedJob whose dependencies are reached has all its Jobs created
    (InOrder does not hold back a suspended JobSet); none of them has a pod, so each counts as
    suspended, and as ready only when it needs no pod at all (parallelism 0).
    """
    counts: list[ReplicatedJobCounts] = []
    for rjob in view.jobset.spec.replicated_jobs:
        if not dependencies_are_reached(rjob, view.replicas, view.counts):
            counts.append(ReplicatedJobCounts(rjob.name))
            continue
        spec = rjob.template.spec
        unstarted_job = {
            "spec": {"parallelism": spec.parallelism, "completions": spec.completions},
            "status": {},
        }
        ready = rjob.replicas if job_is_ready(unstarted_job) else 0
        counts.append(ReplicatedJobCounts(rjob.name, ready=ready, suspended=rjob.replicas))
    return tuple(counts)
