"""Execution attempts (KEP-1282, gate ExecutionAttemptsTracking; docs/behaviour.md).

See docs/behaviour.md#execution-attempts.

``status.executionAttempts`` numbers the runs of a JobSet from 0. A run starts when the JobSet
first runs, on every resume after a suspension, and on every global restart (the failure policy
counts that one: ``StatusDraft.restarted``). The Jobs of a run, and so their pods, carry its
number in the ``jobset.sigs.k8s.io/execution-attempt`` annotation, written when a Job is
created and in the same patch that resumes it, so no pod of a run starts with another run's
number.

Why the Jobs are read, not only the status: a resume is recorded by one status write, and that
write may fail after the resume patches landed; with InOrder startup the Suspended condition
also stays True for several passes while one replicatedJob after the other is resumed. So
"this pass resumes" is decided from the Jobs of the current restart attempt:

* some active ones run (not suspended): the resume was already applied to them; the attempt is
  the highest number they carry (or the stored one, if higher: a restart since);
* none runs but some are suspended: this pass is the first of the resume: stored + 1;
* no active Job at all (a restart replacing them): nothing to resume, the stored number stands.

Each resume is therefore counted once, however many passes or retried writes it takes. A pass
that sees a failed Job runs the failure policy instead; when that restarts the JobSet, the
restart is the new attempt and the resume is not counted on top of it.

Counting starts (a JobSet with no ``executionAttempts`` yet) at ``status.restarts``: 0 for a new
JobSet, and for a JobSet already running when the gate was turned on (an upgrade) its restarts so
far, so ``executionAttempts >= restarts`` always holds. A JobSet that is suspended and never ran
is left without the field until its first resume (then 0, not 1). With the gate off the field is
neither written nor changed, and no annotation is written.
"""

import dataclasses
import re
from typing import Final

from jobset_controller.api import EXECUTION_ATTEMPT_KEY, ConditionType
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.jobs import (
    Job,
    is_being_deleted,
    is_suspended,
    pod_template_of,
)
from jobset_controller.reconcile.view import JobSetView

# What a Job without the annotation (created before the gate was on) counts as.
_UNKNOWN: Final = -1
_DECIMAL: Final = re.compile(r"[0-9]+")


def start_counting(view: JobSetView, draft: StatusDraft) -> StatusDraft:
    """The draft with ``executionAttempts`` set if it should be counted from now on: at
    ``status.restarts`` unless the JobSet is suspended and never ran (gate off: unchanged)."""
    if not view.features.execution_attempts_tracking or draft.execution_attempts is not None:
        return draft
    if view.suspended and draft.restarts == 0 and not _running(view):
        return draft  # never ran: counting starts at its first resume
    return dataclasses.replace(draft, execution_attempts=draft.restarts)


def count_resume(view: JobSetView, draft: StatusDraft) -> StatusDraft:
    """The draft with the attempt of a resume counted (once, however many passes it takes).

    Only a running JobSet whose stored Suspended condition is True resumes; its attempt is
    decided from the Jobs of the current restart attempt (module docstring). Called after the
    failure policy: a pass that restarts the JobSet counts the restart, not a resume.
    """
    stored = draft.execution_attempts
    if stored is None or view.jobset.status.execution_attempts is None:
        return draft  # not counted before this pass: its first run is attempt ``restarts``
    if view.suspended or not draft.has_true_condition(ConditionType.SUSPENDED):
        return draft
    running = _running(view)
    if running:
        attempt = max(stored, *(attempt_of(job) for job in running))
    elif any(is_suspended(job) and not is_being_deleted(job) for job in view.children.active):
        attempt = stored + 1
    else:
        attempt = stored
    return dataclasses.replace(draft, execution_attempts=attempt)


def annotation_value(view: JobSetView, draft: StatusDraft) -> str | None:
    """The ``execution-attempt`` annotation for Jobs created or resumed this pass (None: the gate
    is off and no annotation is written). A JobSet not counted yet writes 0."""
    if not view.features.execution_attempts_tracking:
        return None
    return str(draft.execution_attempts or 0)


def attempt_of(job: Job) -> int:
    """The execution attempt a Job's pod template carries (-1 when absent or unreadable)."""
    metadata = pod_template_of(job).get("metadata") or {}
    value = (metadata.get("annotations") or {}).get(EXECUTION_ATTEMPT_KEY)
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    return _UNKNOWN


def _running(view: JobSetView) -> list[Job]:
    """The current attempt's active Jobs that are resumed (not suspended, not being deleted)."""
    return [
        job for job in view.children.active if not is_suspended(job) and not is_being_deleted(job)
    ]
