"""The status a pass is building, and the events that depend on writing it.

Why a frozen draft: each step of the pass (failure policy, success policy, startup order, suspend)
takes the draft and returns a new one, so a step's effect is its return value and the steps can be
tested one by one. Every condition change queues its event here (gated on the status write), the
way upstream collects events on its status-update record.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jobset_controller.api import JobSetStatus
from jobset_controller.reconcile.conditions import Conditions, NewCondition, is_true, set_condition
from jobset_controller.reconcile.counts import ReplicatedJobCounts
from jobset_controller.reconcile.plan import Event


@dataclass(frozen=True)
class StatusDraft:
    """The new status as far as decided, plus the events queued for after its write.

    Attributes:
        conditions: ``status.conditions`` as wire dicts, in order.
        restarts: ``status.restarts`` (global restarts).
        restarts_count_towards_max: ``status.restartsCountTowardsMax``.
        terminal_state: ``status.terminalState`` ("" while running).
        replicated_jobs: The counts of this pass, one entry per replicatedJob in spec order.
        job_restarts: RestartJob gate: ``jobRestarts`` per replicatedJob name (absent = none).
        job_restarts_count_towards_max: RestartJob gate: ``jobRestartsCountTowardsMax``.
        now: The pass's time, formatted for ``lastTransitionTime``.
        events: Events to emit once the status is written.
    """

    conditions: Conditions
    restarts: int
    restarts_count_towards_max: int
    terminal_state: str
    replicated_jobs: tuple[ReplicatedJobCounts, ...]
    job_restarts: Mapping[str, tuple[int, ...]]
    job_restarts_count_towards_max: Mapping[str, tuple[int, ...]]
    now: str
    events: tuple[Event, ...] = ()

    @classmethod
    def start(
        cls,
        status: JobSetStatus,
        counts: Sequence[ReplicatedJobCounts],
        *,
        now: str,
        carry_job_restarts: bool,
    ) -> "StatusDraft":
        """The draft a pass starts from: the stored status with this pass's counts.

        ``carry_job_restarts`` (the RestartJob gate) keeps the per-index restart arrays; without
        the gate they are dropped, as upstream drops them.
        """
        job_restarts: dict[str, tuple[int, ...]] = {}
        towards_max: dict[str, tuple[int, ...]] = {}
        if carry_job_restarts:
            for entry in status.replicated_jobs_status:
                if entry.job_restarts:
                    job_restarts[entry.name] = tuple(entry.job_restarts)
                if entry.job_restarts_count_towards_max:
                    towards_max[entry.name] = tuple(entry.job_restarts_count_towards_max)
        return cls(
            conditions=tuple(condition.to_dict() for condition in status.conditions),
            restarts=status.restarts,
            restarts_count_towards_max=status.restarts_count_towards_max,
            terminal_state=status.terminal_state,
            replicated_jobs=tuple(counts),
            job_restarts=job_restarts,
            job_restarts_count_towards_max=towards_max,
            now=now,
        )

    def with_condition(self, new: NewCondition) -> "StatusDraft":
        """The draft with ``new`` written (spec 4.1); a change queues the condition's event."""
        conditions, changed = set_condition(self.conditions, new, self.now)
        if not changed:
            return self
        event = Event(new.event_type, new.reason, new.message, after_status=True)
        return dataclasses.replace(self, conditions=conditions, events=(*self.events, event))

    def with_event(self, event: Event) -> "StatusDraft":
        """The draft with one more event queued."""
        return dataclasses.replace(self, events=(*self.events, event))

    def has_true_condition(self, condition_type: str) -> bool:
        """A condition of that type is True in the draft."""
        return is_true(self.conditions, condition_type)

    def job_restarts_of(self, rjob_name: str, replicas: int) -> tuple[int, ...]:
        """``jobRestarts`` of one replicatedJob, materialised as ``replicas`` zeros if unset."""
        return _padded(self.job_restarts.get(rjob_name, ()), replicas)

    def job_restarts_count_towards_max_of(self, rjob_name: str, replicas: int) -> tuple[int, ...]:
        """``jobRestartsCountTowardsMax`` of one replicatedJob, zeros if unset."""
        return _padded(self.job_restarts_count_towards_max.get(rjob_name, ()), replicas)


def _padded(values: tuple[int, ...], length: int) -> tuple[int, ...]:
    return values + (0,) * (length - len(values)) if len(values) < length else values
