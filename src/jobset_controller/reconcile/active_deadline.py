"""The active deadline: ``spec.activeDeadlineSeconds`` and ``status.startTime`` (KEP-1186).

See docs/behaviour.md#active-deadline. Gate ``JobSetActiveDeadlineSeconds`` (alpha, off); with it
off nothing here runs, so a JobSet behaves exactly as on upstream's v0.12.0, which has neither the
deadline nor ``startTime``: the spec field is kept, never enforced, and a stored ``startTime`` is
neither set, changed nor removed.

Why the pass keeps a start time of its own instead of reading the Jobs': the deadline is about the
JobSet's current run, and neither a Job's ``startTime`` (cleared on every resume, gone with the
Job on a global restart) nor the JobSet's creation time says when that run began. So, with the
gate on, ``startTime`` is written by the pass from ``Snapshot.now``:

* set to now when the JobSet runs (not suspended) and has none: its first start, and every
  resume, since a suspension removed it (time spent queued by Kueue does not count);
* removed while the JobSet is suspended;
* reset to now by a global restart (``StatusDraft.restarted``: RestartJobSet and
  RestartJobSetAndIgnoreMaxRestarts), not by a restart of one Job (RestartJob*);
* never touched once the JobSet finished, nor for one managed by another controller (the pass
  stops before this step for both).

It is kept whether or not a deadline is set, so a deadline added to a running JobSet counts from
the run's real start. An unreadable stored value (the CRD's ``date-time`` format makes that
unlikely) is replaced by now, as a missing one is.

The deadline has passed when ``now >= startTime + activeDeadlineSeconds``. A start time in the
future (another replica's clock ahead of ours) has therefore not passed, and a deadline beyond
what a datetime can hold never passes. Until it passes, the pass asks to be run again when it
does: a hung JobSet's Jobs send no events, so nothing else would wake it. The field is mutable:
each pass reads the current value, so raising, lowering, adding or removing it takes effect at
the next pass.
"""

import dataclasses
from dataclasses import dataclass
from datetime import timedelta

from jobset_controller.reconcile.catalogue import (
    DEADLINE_EXCEEDED_REASON,
    deadline_exceeded_message,
)
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.terminal import fail_jobset, is_finished
from jobset_controller.reconcile.timestamps import parse_time
from jobset_controller.reconcile.view import JobSetView


@dataclass(frozen=True)
class Deadline:
    """Where the active deadline stands at this pass's ``now``.

    Attributes:
        seconds: ``spec.activeDeadlineSeconds`` (0: no deadline is running).
        remaining: Seconds until it passes, 0 once it has; None when no deadline is running (the
            gate is off, no deadline is set, the JobSet is suspended or has no start time, or the
            deadline is too far away to be represented).
    """

    seconds: int = 0
    remaining: float | None = None

    @property
    def expired(self) -> bool:
        """The deadline has passed: the JobSet must stop (unless its success policy is met)."""
        return self.remaining is not None and self.remaining <= 0


NO_DEADLINE = Deadline()


def keep_start_time(view: JobSetView, draft: StatusDraft) -> StatusDraft:
    """The draft with ``startTime`` as this pass leaves it: removed while suspended, set to now
    when running without one; unchanged otherwise, and always with the gate off."""
    if not draft.track_start_time:
        return draft
    if view.suspended:
        return dataclasses.replace(draft, start_time=None)
    if parse_time(draft.start_time) is None:
        return dataclasses.replace(draft, start_time=draft.now)
    return draft


def deadline_of(view: JobSetView, draft: StatusDraft) -> Deadline:
    """The active deadline of the JobSet of ``view``, counted from the draft's ``startTime``."""
    seconds = view.jobset.spec.active_deadline_seconds
    if not draft.track_start_time or seconds is None or view.suspended:
        return NO_DEADLINE
    started = parse_time(draft.start_time)
    if started is None:
        return NO_DEADLINE
    try:
        ends = started + timedelta(seconds=seconds)
    except OverflowError:
        return NO_DEADLINE  # beyond year 9999 (or timedelta's range): never
    remaining = (ends - view.now).total_seconds()
    return Deadline(seconds, max(remaining, 0.0))


def fail_for_deadline(draft: StatusDraft, deadline: Deadline) -> StatusDraft:
    """The draft with the JobSet Failed for its passed deadline (reason DeadlineExceeded)."""
    return fail_jobset(draft, DEADLINE_EXCEEDED_REASON, deadline_exceeded_message(deadline.seconds))


def wake_for_deadline(
    view: JobSetView, draft: StatusDraft, requeue_after: float | None = None
) -> float | None:
    """``requeue_after``, shortened to the time left until the deadline passes when a deadline is
    running on the draft's ``startTime`` (the earlier of the two wins). A finished draft keeps
    ``requeue_after``: nothing is left to stop."""
    if is_finished(draft.conditions):
        return requeue_after
    remaining = deadline_of(view, draft).remaining
    if remaining is None:
        return requeue_after
    return remaining if requeue_after is None else min(requeue_after, remaining)
