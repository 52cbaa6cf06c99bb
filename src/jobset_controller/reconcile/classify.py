"""Which attempt a child Job belongs to, and how it ended (docs/behaviour.md#classification).

Every pass sorts the JobSet's Jobs into four buckets:

* **previous**: left over from an earlier attempt (its ``restart-attempt`` label is below
  ``status.restarts``, or with the RestartJob gate its ``job-restart-attempt`` label is below the
  per-index target in ``jobRestarts``). These are deleted; they never count in the status.
* **succeeded** / **failed**: the current attempt's Jobs with a ``Complete=True`` /
  ``Failed=True`` condition (Complete is looked at first).
* **active**: the current attempt's other Jobs, whatever else their conditions say (Suspended,
  FailureTarget and SuccessCriteriaMet do not finish a Job).

With the Configuration's ``earlyJobConditions`` (``early=True``), the Job controller's interim
conditions count as what they announce: ``SuccessCriteriaMet=True`` as succeeded and
``FailureTarget=True`` as failed (the terminal condition is still looked at first). The Job
controller sets them as soon as the outcome is certain and adds ``Complete``/``Failed`` only once
every pod of the Job has terminated, so acting on them saves the Job's pods' termination grace
period before a restart or the JobSet's end (docs/behaviour.md#early-job-conditions). ``Failed``
copies its reason and message from ``FailureTarget``, so the failure policy sees the same words.

A Job whose labels cannot be read is an ``InvalidChild``: upstream returns a reconcile error and
retries; here the pass stops with a Warning event and writes nothing (see the package docstring).
A fix to the Job's labels, or its deletion, triggers the next pass through the Job watch.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from jobset_controller.api import (
    JOB_INDEX_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
)
from jobset_controller.reconcile.jobs import Job, labels_of, name_of, true_condition, uid_of

JOB_COMPLETE: Final = "Complete"
JOB_FAILED: Final = "Failed"
JOB_SUSPENDED: Final = "Suspended"
# The Job controller's interim conditions (Kubernetes >= 1.31): the outcome is decided, the
# Job's pods are still terminating.
JOB_SUCCESS_CRITERIA_MET: Final = "SuccessCriteriaMet"
JOB_FAILURE_TARGET: Final = "FailureTarget"

# Finished Job condition -> bucket, in this order (docs/behaviour.md#classification, step 2).
FINISHED_BUCKETS: Final = ((JOB_COMPLETE, "succeeded"), (JOB_FAILED, "failed"))
# The same with earlyJobConditions: the terminal conditions first, then the interim ones.
EARLY_FINISHED_BUCKETS: Final = (
    *FINISHED_BUCKETS,
    (JOB_SUCCESS_CRITERIA_MET, "succeeded"),
    (JOB_FAILURE_TARGET, "failed"),
)

# Go's strconv.Atoi: optional sign and decimal digits, nothing else (no spaces, no "_").
_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Children:
    """The JobSet's child Jobs, sorted into buckets; each tuple keeps the snapshot's order."""

    previous: tuple[Job, ...] = ()
    active: tuple[Job, ...] = ()
    succeeded: tuple[Job, ...] = ()
    failed: tuple[Job, ...] = ()

    def current(self) -> tuple[Job, ...]:
        """Jobs of the current attempt (everything but previous)."""
        return self.active + self.succeeded + self.failed

    def names(self) -> frozenset[str]:
        """Names of all child Jobs in any bucket: a new Job must not take one of them."""
        return frozenset(name_of(job) for job in self.previous + self.current())


@dataclass(frozen=True)
class InvalidChild:
    """A child Job whose labels cannot be read, so the pass cannot go on safely."""

    job_name: str
    problem: str

    def note(self) -> str:
        """The Warning event's note."""
        return f'child job "{self.job_name}" cannot be reconciled: {self.problem}'


def classify_jobs(
    jobs: Sequence[Job],
    *,
    restarts: int,
    replicas: Mapping[str, int],
    job_restarts: Mapping[str, Sequence[int]] | None,
    early: bool = False,
) -> Children | InvalidChild:
    """Sort ``jobs`` into buckets, or name the first Job that cannot be sorted.

    Args:
        jobs: The child Jobs of the snapshot.
        restarts: ``status.restarts``, the current global attempt.
        replicas: Replicas of each replicatedJob of the spec, by name.
        job_restarts: With the RestartJob gate, ``jobRestarts`` of each replicatedJob by name
            (missing or empty means all zeros); None when the gate is off.
        early: The Configuration's ``earlyJobConditions``: interim conditions finish a Job.
    """
    finished = EARLY_FINISHED_BUCKETS if early else FINISHED_BUCKETS
    buckets: dict[str, list[Job]] = {"previous": [], "active": [], "succeeded": [], "failed": []}
    for job in jobs:
        bucket = _bucket_of(job, restarts, replicas, job_restarts, finished)
        if isinstance(bucket, InvalidChild):
            return bucket
        buckets[bucket].append(job)
    return Children(
        previous=tuple(buckets["previous"]),
        active=tuple(buckets["active"]),
        succeeded=tuple(buckets["succeeded"]),
        failed=tuple(buckets["failed"]),
    )


def parse_decimal(value: object) -> int | None:
    """An integer label value as Go's strconv.Atoi reads it, else None."""
    if not isinstance(value, str) or _DECIMAL.fullmatch(value) is None:
        return None
    return int(value)


def _bucket_of(
    job: Job,
    restarts: int,
    replicas: Mapping[str, int],
    job_restarts: Mapping[str, Sequence[int]] | None,
    finished: Sequence[tuple[str, str]],
) -> str | InvalidChild:
    name = name_of(job)
    if not name or not uid_of(job):
        return InvalidChild(name or "<unnamed>", "metadata.name and metadata.uid must be set")
    labels = labels_of(job)
    attempt = parse_decimal(labels.get(RESTARTS_KEY))
    if attempt is None:
        return _bad_label(name, RESTARTS_KEY, labels)
    if attempt < restarts:
        return "previous"
    if job_restarts is not None:
        outdated = _is_previous_job_attempt(name, labels, replicas, job_restarts)
        if isinstance(outdated, InvalidChild):
            return outdated
        if outdated:
            return "previous"
    for condition_type, bucket in finished:
        if true_condition(job, condition_type) is not None:
            return bucket
    return "active"


def _is_previous_job_attempt(
    name: str,
    labels: Mapping[str, str],
    replicas: Mapping[str, int],
    job_restarts: Mapping[str, Sequence[int]],
) -> bool | InvalidChild:
    """RestartJob gate: attempt below its index's target (docs/behaviour.md#classification)."""
    rjob_name = labels.get(REPLICATED_JOB_NAME_KEY)
    if not rjob_name:
        return InvalidChild(name, f"label {REPLICATED_JOB_NAME_KEY} is missing or empty")
    job_index = parse_decimal(labels.get(JOB_INDEX_KEY))
    if job_index is None:
        return _bad_label(name, JOB_INDEX_KEY, labels)
    if JOB_RESTART_ATTEMPT_KEY not in labels:
        # Created before the gate was on: counted as current, as upstream does.
        return False
    job_attempt = parse_decimal(labels[JOB_RESTART_ATTEMPT_KEY])
    if job_attempt is None:
        return _bad_label(name, JOB_RESTART_ATTEMPT_KEY, labels)
    if rjob_name not in replicas:
        # Not a replicatedJob of the spec: there is no target, so nothing is outdated.
        return False
    # An absent or empty array means all zeros, one per replica; read without building it, so a
    # child costs the same whatever the replicas.
    targets = job_restarts.get(rjob_name) or ()
    if not 0 <= job_index < (len(targets) or replicas[rjob_name]):
        return InvalidChild(
            name, f"label {JOB_INDEX_KEY}={job_index} is out of range for {rjob_name}"
        )
    return job_attempt < (targets[job_index] if job_index < len(targets) else 0)


def _bad_label(name: str, key: str, labels: Mapping[str, str]) -> InvalidChild:
    if key not in labels:
        return InvalidChild(name, f"label {key} is missing")
    return InvalidChild(name, f"label {key}={labels[key]!r} is not an integer")
