"""How a JobSet finishes: the Completed and Failed outcomes.

See docs/behaviour.md#failure-actions, #success-policy.

Both are written the same way: the terminal condition (its event queued for after the status
write), ``RestartingJobSet=False`` explaining why the restart is over (effective only when a
RestartingJobSet condition exists), and ``terminalState``. A JobSet with a Completed=True or
Failed=True condition is finished: later passes only delete its active Jobs and run its TTL.
"""

import dataclasses

from jobset_controller.api import ConditionType, TerminalState
from jobset_controller.reconcile.catalogue import (
    ALL_JOBS_COMPLETED_MESSAGE,
    ALL_JOBS_COMPLETED_REASON,
    JOBSET_COMPLETED_MESSAGE,
    JOBSET_COMPLETED_REASON,
    JOBSET_FAILED_MESSAGE,
    JOBSET_FAILED_REASON,
)
from jobset_controller.reconcile.conditions import Conditions, NewCondition, is_true
from jobset_controller.reconcile.draft import StatusDraft


def is_finished(conditions: Conditions) -> bool:
    """Completed=True or Failed=True is among ``conditions``."""
    return is_true(conditions, ConditionType.COMPLETED) or is_true(conditions, ConditionType.FAILED)


def fail_jobset(draft: StatusDraft, reason: str, message: str) -> StatusDraft:
    """The draft with the JobSet Failed for ``reason``/``message``."""
    draft = draft.with_condition(NewCondition(ConditionType.FAILED, True, reason, message))
    draft = draft.with_condition(
        NewCondition(
            ConditionType.RESTARTING_JOBSET, False, JOBSET_FAILED_REASON, JOBSET_FAILED_MESSAGE
        )
    )
    return dataclasses.replace(draft, terminal_state=TerminalState.FAILED.value)


def complete_jobset(draft: StatusDraft) -> StatusDraft:
    """The draft with the JobSet Completed."""
    draft = draft.with_condition(
        NewCondition(
            ConditionType.COMPLETED, True, ALL_JOBS_COMPLETED_REASON, ALL_JOBS_COMPLETED_MESSAGE
        )
    )
    draft = draft.with_condition(
        NewCondition(
            ConditionType.RESTARTING_JOBSET,
            False,
            JOBSET_COMPLETED_REASON,
            JOBSET_COMPLETED_MESSAGE,
        )
    )
    return dataclasses.replace(draft, terminal_state=TerminalState.COMPLETED.value)
