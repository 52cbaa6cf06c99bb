"""Status writes that only move progress counters, gathered into one write per batch period.

WHY: a JobSet's `replicatedJobsStatus` counters (`active`, `ready`, `succeeded`, `suspended`)
follow its Jobs, and its Jobs' pods start, become ready and finish one by one. Written as they
come, every JobSet of N Jobs costs about 3N status writes (each an etcd write and a watch event
for every client watching JobSets); measured in the soak (docs/reliability.md), ours wrote 10.8
status updates per JobSet against upstream's 5.6, most of them one counter of one Job. Kube's
own Job controller gathers its pod updates for a second (`syncJobBatchPeriod`) for the same
reason.

Guarantees (each pinned by a test in tests/unit/controller/test_status_counts.py):

1. A status that differs from the stored one in anything but progress counters (a condition,
   `restarts`, `terminalState`, a new replicatedJob entry, a `failed` count) is written by the
   pass that computed it, with every counter it holds: nothing is held back.
2. A status that differs only in progress counters is written by the first pass at least
   `period` seconds after the pass that first saw such a difference; the key is requeued for
   that moment, so the write never waits for another event, and every counter change seen
   meanwhile goes out in that one write.
3. A period of 0 writes every status at once (upstream's behaviour).
4. Nothing outlives its JobSet: `forget` drops a key's pending time (the JobSet was deleted),
   and a pass with no difference at all drops it too.

A held status changes only what the API shows: the pass still decides from the Jobs themselves
(startup order, success and failure policies read the Job cache, not the stored counters).
"""

import dataclasses

from jobset_controller.reconcile.plan import Plan
from jobset_controller.reconcile.status import differs_only_in_progress_counts
from jobset_controller.runtime.clock import Clock


class ProgressCountBatch:
    """When a pass may write a status whose only news is progress counters (module docstring)."""

    def __init__(self, clock: Clock, period: float) -> None:
        """`period`: the Configuration's `progressCounts.batchPeriod`, which owns the default."""
        if period < 0:
            raise ValueError(f"the batch period must not be negative, got {period}")
        self._clock = clock
        self._period = period
        self._first_seen: dict[str, float] = {}  # key -> when a held difference was first seen

    def __len__(self) -> int:
        return len(self._first_seen)

    def forget(self, key: str) -> None:
        self._first_seen.pop(key, None)

    def hold(self, key: str, stored: object, plan: Plan) -> tuple[Plan, float | None]:
        """`plan` as this pass executes it, and the seconds until a held write is due (None: no
        write held). `stored` is the JobSet's `.status` as the pass read it."""
        if plan.status is None:
            self._first_seen.pop(key, None)
            return plan, None
        if (
            self._period <= 0
            or not isinstance(stored, dict)
            or plan.restart is not None
            or plan.completed
            or plan.failed
            or any(event.after_status for event in plan.events)
            or not differs_only_in_progress_counts(stored, plan.status)
        ):
            self._first_seen.pop(key, None)
            return plan, None
        now = self._clock.now()
        first = self._first_seen.setdefault(key, now)
        due = first + self._period - now
        if due <= 0:
            del self._first_seen[key]
            return plan, None
        held = dataclasses.replace(plan, status=None, status_resource_version=None)
        return held, due
