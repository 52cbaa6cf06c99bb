"""The status a pass is building, and the events that depend on writing it.

Why a frozen draft: each step of the pass (failure policy, success policy, startup order, suspend)
takes the draft and returns a new one, so a step's effect is its return value and the steps can be
tested one by one. Every condition change queues its event here (gated on the status write), the
way upstream collects events on its status-update record.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from jobset_controller.api import JobSetStatus
from jobset_controller.reconcile.conditions import Conditions, NewCondition, is_true, set_condition
from jobset_controller.reconcile.counts import ReplicatedJobCounts
from jobset_controller.reconcile.plan import Event, Restart


@dataclass(frozen=True)
class IndexCounts:
    """One replicatedJob's per-Job-index counters (``jobRestarts`` or its countTowardsMax twin).

    Why sparse: ``replicas`` is a number in the spec (up to the int32 range) and a pass must cost
    what the existing objects cost, not what the spec says. Only the non-zero counters are held,
    so reading one index, counting a restart and summing cost nothing per replica. ``length`` is
    the length of the status array, kept so the array is rendered back exactly as it was read; a
    restart stretches it to one entry per replica, as upstream's array has, which only happens
    with a RestartJob action and so at most ``MAX_JOB_RESTART_REPLICAS`` entries.

    Attributes:
        length: Entries of the status array (0: the array is absent).
        nonzero: Job index -> counter, for the counters that are not zero.
    """

    length: int = 0
    nonzero: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_status(cls, values: Sequence[int]) -> "IndexCounts":
        """The counters of a status array (bounded by the API's maxItems)."""
        nonzero = {index: value for index, value in enumerate(values) if value}
        return cls(len(values), MappingProxyType(nonzero))

    def at(self, index: int) -> int:
        """The counter of Job ``index`` (0 when the array does not reach it)."""
        return self.nonzero.get(index, 0)

    def incremented(self, index: int, replicas: int) -> "IndexCounts":
        """One more for Job ``index``; the array then has at least ``replicas`` entries."""
        nonzero = dict(self.nonzero)
        nonzero[index] = nonzero.get(index, 0) + 1
        return IndexCounts(max(self.length, replicas, index + 1), MappingProxyType(nonzero))

    def total(self) -> int:
        """The sum of all counters."""
        return sum(self.nonzero.values())

    def as_list(self) -> list[int]:
        """The status array."""
        return [self.nonzero.get(index, 0) for index in range(self.length)]


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
        execution_attempts: ExecutionAttemptsTracking gate: ``status.executionAttempts`` (None:
            not counted yet, or the gate is off and the stored value is left alone).
        restart: The restart the failure policy decided in this pass, if any (``Plan.restart``).
        track_start_time: JobSetActiveDeadlineSeconds gate: this controller keeps
            ``status.startTime`` (False: the stored value is neither read nor changed).
        start_time: With ``track_start_time``, ``status.startTime`` as it will be written (None:
            removed); ``active_deadline`` decides it.
    """

    conditions: Conditions
    restarts: int
    restarts_count_towards_max: int
    terminal_state: str
    replicated_jobs: tuple[ReplicatedJobCounts, ...]
    job_restarts: Mapping[str, IndexCounts]
    job_restarts_count_towards_max: Mapping[str, IndexCounts]
    now: str
    events: tuple[Event, ...] = ()
    execution_attempts: int | None = None
    restart: Restart | None = None
    track_start_time: bool = False
    start_time: str | None = None

    @classmethod
    def start(
        cls,
        status: JobSetStatus,
        counts: Sequence[ReplicatedJobCounts],
        *,
        now: str,
        carry_job_restarts: bool,
        track_execution_attempts: bool = False,
        track_start_time: bool = False,
    ) -> "StatusDraft":
        """The draft a pass starts from: the stored status with this pass's counts.

        ``carry_job_restarts`` (the RestartJob gate) keeps the per-index restart arrays; without
        the gate they are dropped, as upstream drops them. ``track_execution_attempts`` (the
        ExecutionAttemptsTracking gate) reads ``executionAttempts``; without it the draft holds
        None and the stored value is neither read nor changed. ``track_start_time`` (the
        JobSetActiveDeadlineSeconds gate) reads ``startTime`` the same way.
        """
        job_restarts: dict[str, IndexCounts] = {}
        towards_max: dict[str, IndexCounts] = {}
        if carry_job_restarts:
            for entry in status.replicated_jobs_status:
                if entry.job_restarts:
                    job_restarts[entry.name] = IndexCounts.from_status(entry.job_restarts)
                if entry.job_restarts_count_towards_max:
                    towards_max[entry.name] = IndexCounts.from_status(
                        entry.job_restarts_count_towards_max
                    )
        return cls(
            conditions=tuple(condition.to_dict() for condition in status.conditions),
            restarts=status.restarts,
            restarts_count_towards_max=status.restarts_count_towards_max,
            terminal_state=status.terminal_state,
            replicated_jobs=tuple(counts),
            job_restarts=job_restarts,
            job_restarts_count_towards_max=towards_max,
            now=now,
            execution_attempts=status.execution_attempts if track_execution_attempts else None,
            track_start_time=track_start_time,
            start_time=status.start_time if track_start_time else None,
        )

    def with_condition(self, new: NewCondition) -> "StatusDraft":
        """``new`` written; a change queues its event (docs/behaviour.md#condition-rules)."""
        conditions, changed = set_condition(self.conditions, new, self.now)
        if not changed:
            return self
        event = Event(new.event_type, new.reason, new.message, after_status=True)
        return dataclasses.replace(self, conditions=conditions, events=(*self.events, event))

    def restarted(self, *, counts_towards_max: bool) -> "StatusDraft":
        """One more global restart: a new run, so one more execution attempt when counted, and
        (when tracked) a new ``startTime``: the active deadline counts from the restart."""
        attempts = self.execution_attempts
        return dataclasses.replace(
            self,
            restarts=self.restarts + 1,
            restarts_count_towards_max=self.restarts_count_towards_max + int(counts_towards_max),
            execution_attempts=None if attempts is None else attempts + 1,
            start_time=self.now if self.track_start_time else self.start_time,
        )

    def with_event(self, event: Event) -> "StatusDraft":
        """The draft with one more event queued."""
        return dataclasses.replace(self, events=(*self.events, event))

    def has_true_condition(self, condition_type: str) -> bool:
        """A condition of that type is True in the draft."""
        return is_true(self.conditions, condition_type)

    def job_restarts_of(self, rjob_name: str) -> IndexCounts:
        """``jobRestarts`` of one replicatedJob (all zero if unset)."""
        return self.job_restarts.get(rjob_name, IndexCounts())

    def job_restarts_count_towards_max_of(self, rjob_name: str) -> IndexCounts:
        """``jobRestartsCountTowardsMax`` of one replicatedJob (all zero if unset)."""
        return self.job_restarts_count_towards_max.get(rjob_name, IndexCounts())
