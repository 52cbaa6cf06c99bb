"""ttlSecondsAfterFinished: delete a finished JobSet once its time is up (docs/behaviour.md#ttl).

The JobSet finished when its first Completed=True or Failed=True condition was set (its
``lastTransitionTime``). From ``finish + ttl`` on, the JobSet is deleted (foreground, so it goes
once its Jobs and their Pods are gone); before that, the pass asks to be requeued at that moment.
``ttl = 0`` deletes at once; no TTL never deletes. A finish time that cannot be read (upstream:
a reconcile error) postpones nothing and deletes nothing.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobset_controller.api import ConditionType
from jobset_controller.reconcile.conditions import Conditions
from jobset_controller.reconcile.timestamps import parse_time

_FINISHED_TYPES = frozenset({ConditionType.COMPLETED, ConditionType.FAILED})


@dataclass(frozen=True)
class TtlOutcome:
    """Delete the JobSet now, or reconcile again after ``requeue_after`` seconds, or neither."""

    delete_jobset: bool = False
    requeue_after: float | None = None


def finish_time(conditions: Conditions) -> datetime | None:
    """``lastTransitionTime`` of the first Completed=True/Failed=True condition, if readable."""
    for condition in conditions:
        if condition.get("type") in _FINISHED_TYPES and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def ttl_outcome(ttl_seconds: int | None, conditions: Conditions, now: datetime) -> TtlOutcome:
    """What the TTL asks of a finished JobSet at ``now``."""
    if ttl_seconds is None:
        return TtlOutcome()
    finished = finish_time(conditions)
    if finished is None:
        return TtlOutcome()
    remaining = finished + timedelta(seconds=ttl_seconds) - now
    if remaining <= timedelta(0):
        return TtlOutcome(delete_jobset=True)
    return TtlOutcome(requeue_after=remaining.total_seconds())
