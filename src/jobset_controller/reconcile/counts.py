"""The per-replicatedJob counts of ``status.replicatedJobsStatus`` (docs/behaviour.md#status).

Only Jobs of the current attempt count (previous Jobs are on their way out), and only Jobs whose
``replicatedjob-name`` label names a replicatedJob of the spec. Every replicatedJob of the spec
gets an entry, in spec order, even before it has Jobs.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jobset_controller.api import REPLICATED_JOB_NAME_KEY
from jobset_controller.reconcile.classify import Children
from jobset_controller.reconcile.jobs import (
    Job,
    is_suspended,
    labels_of,
    optional_int,
    spec_of,
    status_count,
)


@dataclass(frozen=True)
class ReplicatedJobCounts:
    """How many of one replicatedJob's current Jobs are in each state."""

    name: str
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    suspended: int = 0

    def started(self) -> int:
        """Jobs that are ready or already finished: what InOrder and dependsOn Ready count."""
        return self.ready + self.failed + self.succeeded


def job_is_ready(job: Job) -> bool:
    """``succeeded + ready >= min(parallelism, completions)`` (completions only when set).

    A Job without parallelism reads as 1, the API server's default.
    """
    spec = spec_of(job)
    parallelism = optional_int(spec, "parallelism")
    needed = 1 if parallelism is None else parallelism
    completions = optional_int(spec, "completions")
    if completions is not None:
        needed = min(needed, completions)
    return status_count(job, "succeeded") + status_count(job, "ready") >= needed


def count_replicated_jobs(
    rjob_names: Sequence[str], children: Children
) -> tuple[ReplicatedJobCounts, ...]:
    """One entry per replicatedJob name, in the given order, counting ``children``."""
    tallies: dict[str, dict[str, int]] = {
        name: dict.fromkeys(("ready", "succeeded", "failed", "active", "suspended"), 0)
        for name in rjob_names
    }

    def tally(job: Job) -> dict[str, int] | None:
        return tallies.get(labels_of(job).get(REPLICATED_JOB_NAME_KEY, ""))

    for job in children.active:
        counts = tally(job)
        if counts is None:
            continue
        counts["ready"] += job_is_ready(job)
        counts["active"] += status_count(job, "active") > 0
        counts["suspended"] += is_suspended(job)
    for bucket, jobs in (("succeeded", children.succeeded), ("failed", children.failed)):
        for job in jobs:
            counts = tally(job)
            if counts is not None:
                counts[bucket] += 1
    return tuple(ReplicatedJobCounts(name, **tallies[name]) for name in tallies)


def counts_by_name(
    counts: Sequence[ReplicatedJobCounts],
) -> Mapping[str, ReplicatedJobCounts]:
    """The counts keyed by replicatedJob name."""
    return {entry.name: entry for entry in counts}
