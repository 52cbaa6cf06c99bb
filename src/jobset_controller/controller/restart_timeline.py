"""Every whole-JobSet restart's timeline, for operators (docs/behaviour.md#restart-timeline).

A restart is idle accelerators: the time from a failure to the next attempt running is what the
largest users pay for, and upstream shows none of it (one counter of failed JobSets). Here each
global restart (RestartJobSet, RestartJobSetAndIgnoreMaxRestarts) is followed through four
phases, each observed in ``jobset_restart_phase_duration_seconds{phase}`` when it ends:

    detect    the first failed Job's failure condition -> the restart written (controller)
    teardown  the restart written -> every Job of the previous attempt gone (garbage collector,
              kubelets: the pods' termination grace period, a dead node)
    create    -> every Job of the new attempt created (controller)
    ready     -> every Job ready (scheduler, image pulls, kubelets): RestartingJobSet=False

While one is in progress, ``jobset_restart_started_timestamp_seconds{namespace, jobset_name,
phase}`` holds the time it was written, under the phase it waits in: an alert on its age finds a
restart that is stuck, and says where. When it ends, a Normal ``RestartCompleted`` Event on the
JobSet gives the whole timeline in one line (``jobset-controller status`` shows it). Every restart
(per-Job ones included) counts in ``jobset_restarts_total{action, reason}``, the executor's
counter.

Why in the shell, beside the pure reconcile: the phases are facts of successive passes (what the
caches showed, when), not decisions. The tracker reads only what a pass already has: the
snapshot, the Plan it carried out, the time. A restart decided before this process led (a
failover) is picked up from the JobSet's RestartingJobSet=True condition, timed from its
lastTransitionTime; its detect phase is unknown and not observed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from prometheus_client import CollectorRegistry, Gauge, Histogram

from jobset_controller.api import RESTARTS_KEY, ConditionType
from jobset_controller.reconcile import Plan, Restart, Snapshot
from jobset_controller.reconcile.catalogue import (
    JOBS_READY_REASON,
    restart_completed_message,
)
from jobset_controller.reconcile.classify import parse_decimal
from jobset_controller.reconcile.timestamps import parse_time

DETECT, TEARDOWN, CREATE, READY = "detect", "teardown", "create", "ready"
PHASES: Final = (DETECT, TEARDOWN, CREATE, READY)
# From a second (a small JobSet's teardown) to an hour (thousands of nodes behind a dead one).
PHASE_BUCKETS: Final = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class RestartMetrics:
    """The timeline's metric families (module docstring)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.phase = Histogram(
            "jobset_restart_phase_duration_seconds",
            "Seconds each phase of a whole-JobSet restart took: detect (failure to restart), "
            "teardown (old Jobs gone), create (new Jobs created), ready (new Jobs ready)",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=registry,
        )
        self.started = Gauge(
            "jobset_restart_started_timestamp_seconds",
            "Unix time a whole-JobSet restart in progress was written, labelled with the phase "
            "it waits in (teardown, create, ready); gone once the restart is over",
            ["namespace", "jobset_name", "phase"],
            registry=registry,
        )


@dataclass
class _Open:
    """A restart in progress: its attempt, when it was written, the phase it waits in."""

    attempt: int
    started: datetime
    phase: str
    since: datetime
    restart: Restart | None
    took: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Completed:
    """A restart that just ended: what the RestartCompleted Event says."""

    note: str


class RestartTimeline:
    """The open restart of each JobSet key, advanced by every pass (module docstring)."""

    def __init__(self, metrics: RestartMetrics) -> None:
        self._metrics = metrics
        self._open: dict[str, _Open] = {}

    def forget(self, key: str) -> None:
        """The JobSet is gone: its restart, if any, ends without an observation."""
        self._close(key)

    def passed(self, key: str, snapshot: Snapshot, plan: Plan) -> Completed | None:
        """After a pass whose writes all succeeded: open, advance or close the key's restart;
        a ``Completed`` when it ended with every Job ready."""
        now = snapshot.now
        status = plan.status if plan.status is not None else _stored_status(snapshot)
        restart = plan.restart
        if restart is not None and restart.whole_jobset:
            self._start(key, snapshot, restart, now)
            return None
        current = self._open.get(key)
        if current is None:
            current = self._seed(key, snapshot, status)
            if current is None:
                return None
        if _finished_or_suspended(snapshot, status):
            self._close(key)
            return None
        return self._advance(key, current, snapshot, status, now)

    # ------------------------------------------------------------------ transitions
    def _start(self, key: str, snapshot: Snapshot, restart: Restart, now: datetime) -> None:
        self._close(key)
        failed_at = parse_time(restart.failed_at)
        opened = _Open(restart.attempt, now, TEARDOWN, now, restart)
        if failed_at is not None and failed_at <= now:
            seconds = (now - failed_at).total_seconds()
            opened.took[DETECT] = seconds
            self._metrics.phase.labels(DETECT).observe(seconds)
        self._open[key] = opened
        self._show(key, opened)

    def _seed(self, key: str, snapshot: Snapshot, status: Mapping[str, Any]) -> _Open | None:
        """A restart in progress that this process did not write (failover, controller start)."""
        condition = _condition(status, ConditionType.RESTARTING_JOBSET)
        if condition is None or condition.get("status") != "True":
            return None
        started = parse_time(condition.get("lastTransitionTime")) or snapshot.now
        attempt = int(status.get("restarts") or 0)
        opened = _Open(attempt, started, TEARDOWN, started, None)
        self._open[key] = opened
        self._show(key, opened)
        return opened

    def _advance(
        self,
        key: str,
        current: _Open,
        snapshot: Snapshot,
        status: Mapping[str, Any],
        now: datetime,
    ) -> Completed | None:
        attempts = [_attempt_of(job) for job in snapshot.jobs]
        while True:
            if current.phase == TEARDOWN and all(a >= current.attempt for a in attempts):
                self._next(key, current, CREATE, now)
            elif current.phase == CREATE and _created(attempts, current.attempt, snapshot):
                self._next(key, current, READY, now)
            elif current.phase == READY and _ready(status):
                self._observe(current, READY, now)
                self._close(key)
                return Completed(_note(current, now))
            else:
                return None

    def _next(self, key: str, current: _Open, phase: str, now: datetime) -> None:
        self._observe(current, current.phase, now)
        self._hide(key, current)
        current.phase, current.since = phase, now
        self._show(key, current)

    def _observe(self, current: _Open, phase: str, now: datetime) -> None:
        seconds = max(0.0, (now - current.since).total_seconds())
        current.took[phase] = seconds
        self._metrics.phase.labels(phase).observe(seconds)

    def _close(self, key: str) -> None:
        current = self._open.pop(key, None)
        if current is not None:
            self._hide(key, current)

    # ------------------------------------------------------------------ the gauge
    def _show(self, key: str, current: _Open) -> None:
        namespace, _, name = key.partition("/")
        gauge = self._metrics.started.labels(namespace, name, current.phase)
        gauge.set(current.started.timestamp())

    def _hide(self, key: str, current: _Open) -> None:
        namespace, _, name = key.partition("/")
        with contextlib.suppress(KeyError):  # never shown (a failed set) is nothing to hide
            self._metrics.started.remove(namespace, name, current.phase)


def _stored_status(snapshot: Snapshot) -> Mapping[str, Any]:
    status: Mapping[str, Any] = snapshot.jobset.to_dict().get("status") or {}
    return status


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def _true(status: Mapping[str, Any], kind: str) -> bool:
    condition = _condition(status, kind)
    return condition is not None and condition.get("status") == "True"


def _finished_or_suspended(snapshot: Snapshot, status: Mapping[str, Any]) -> bool:
    return (
        _true(status, ConditionType.COMPLETED)
        or _true(status, ConditionType.FAILED)
        or snapshot.jobset.spec.suspend is True
    )


def _ready(status: Mapping[str, Any]) -> bool:
    condition = _condition(status, ConditionType.RESTARTING_JOBSET)
    return (
        condition is not None
        and condition.get("status") == "False"
        and condition.get("reason") == JOBS_READY_REASON
    )


def _attempt_of(job: Mapping[str, Any]) -> int:
    labels = (job.get("metadata") or {}).get("labels") or {}
    attempt = parse_decimal(labels.get(RESTARTS_KEY))
    return -1 if attempt is None else attempt


def _created(attempts: Sequence[int], attempt: int, snapshot: Snapshot) -> bool:
    expected = sum(rjob.replicas for rjob in snapshot.jobset.spec.replicated_jobs)
    return sum(1 for a in attempts if a == attempt) >= expected


def _note(current: _Open, now: datetime) -> str:
    restart = current.restart
    return restart_completed_message(
        attempt=current.attempt,
        action="" if restart is None else restart.action,
        job="" if restart is None else restart.job,
        reason="" if restart is None else restart.reason,
        took={phase: current.took[phase] for phase in PHASES if phase in current.took},
        total=(now - current.started).total_seconds() + current.took.get(DETECT, 0.0),
    )
