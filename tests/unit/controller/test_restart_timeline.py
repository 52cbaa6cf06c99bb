"""Every whole-JobSet restart's timeline: phases observed as passes see them, the gauge of a
restart in progress, the RestartCompleted note. See docs/behaviour.md#restart-timeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from jobset_controller.api import JobSet
from jobset_controller.controller.restart_timeline import RestartMetrics, RestartTimeline
from jobset_controller.reconcile import Plan, Restart, Snapshot

T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
KEY = "ml/train"
RESTART = Restart(
    "RestartJobSet", "BackoffLimitExceeded", "train-w-1", "2025-06-01T11:59:58Z", True, 1
)


def jobset(
    *, restarts: int = 1, conditions: Sequence[Mapping[str, Any]] = (), suspend: bool = False
) -> JobSet:
    return JobSet.model_validate(
        {
            "metadata": {"name": "train", "namespace": "ml", "uid": "u"},
            "spec": {
                "suspend": suspend,
                "replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {}}}],
            },
            "status": {"restarts": restarts, "conditions": list(conditions)},
        }
    )


def job(index: int, attempt: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"train-w-{index}",
            "labels": {"jobset.sigs.k8s.io/restart-attempt": str(attempt)},
        }
    }


def snapshot(seconds: float, *jobs: Mapping[str, Any], **state: Any) -> Snapshot:
    return Snapshot(
        jobset=jobset(**state), jobs=tuple(jobs), service=None, now=T0 + timedelta(seconds=seconds)
    )


def restarting(status: str, reason: str) -> dict[str, Any]:
    return {
        "type": "RestartingJobSet",
        "status": status,
        "reason": reason,
        "message": "m",
        "lastTransitionTime": "2025-06-01T11:00:00Z",
    }


def status_plan(*conditions: Mapping[str, Any], restart: Restart | None = None) -> Plan:
    return Plan(status={"restarts": 1, "conditions": list(conditions)}, restart=restart)


class Probe:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.timeline = RestartTimeline(RestartMetrics(self.registry))

    def observed(self, phase: str) -> tuple[float, float]:
        count = self.registry.get_sample_value(
            "jobset_restart_phase_duration_seconds_count", {"phase": phase}
        )
        total = self.registry.get_sample_value(
            "jobset_restart_phase_duration_seconds_sum", {"phase": phase}
        )
        return (count or 0.0, total or 0.0)

    def started(self, phase: str) -> float | None:
        return self.registry.get_sample_value(
            "jobset_restart_started_timestamp_seconds",
            {"namespace": "ml", "jobset_name": "train", "phase": phase},
        )


def test_a_restart_is_timed_through_its_four_phases_and_ends_with_its_timeline() -> None:
    probe = Probe()
    timeline = probe.timeline
    restarting_true = restarting("True", "DefaultFailurePolicy")
    old = (job(0, 0), job(1, 0))
    # t=0: the pass that restarts (failure at t=-2)
    assert (
        timeline.passed(
            KEY, snapshot(0, *old, restarts=0), status_plan(restarting_true, restart=RESTART)
        )
        is None
    )
    assert probe.observed("detect") == (1.0, 2.0)
    assert probe.started("teardown") == T0.timestamp()
    # t=10: one old Job left
    assert timeline.passed(KEY, snapshot(10, job(1, 0)), Plan()) is None
    assert probe.started("teardown") == T0.timestamp()
    # t=31: the old ones gone, the pass creates the new ones
    assert timeline.passed(KEY, snapshot(31), Plan()) is None
    assert probe.observed("teardown") == (1.0, 31.0)
    assert probe.started("teardown") is None
    assert probe.started("create") == T0.timestamp()
    # t=33: both new Jobs exist
    assert timeline.passed(KEY, snapshot(33, job(0, 1), job(1, 1)), Plan()) is None
    assert probe.observed("create") == (1.0, 2.0)
    assert probe.started("ready") == T0.timestamp()
    # t=45: the pass that writes JobsReady
    done = timeline.passed(
        KEY, snapshot(45, job(0, 1), job(1, 1)), status_plan(restarting("False", "JobsReady"))
    )
    assert done is not None
    assert probe.observed("ready") == (1.0, 12.0)
    assert probe.started("ready") is None
    assert done.note == (
        "restart 1 (RestartJobSet after train-w-1 failed (BackoffLimitExceeded)) completed in "
        "47.0s: failure seen +2.0s, old Jobs gone +31.0s, new Jobs created +2.0s, all Jobs ready "
        "+12.0s"
    )


def test_phases_one_pass_sees_done_at_once_all_end_then() -> None:
    probe = Probe()
    probe.timeline.passed(KEY, snapshot(0, restarts=0), status_plan(restart=RESTART))
    done = probe.timeline.passed(
        KEY, snapshot(5, job(0, 1), job(1, 1)), status_plan(restarting("False", "JobsReady"))
    )
    assert done is not None
    assert [probe.observed(p)[0] for p in ("teardown", "create", "ready")] == [1.0, 1.0, 1.0]


def test_a_per_job_restart_opens_no_timeline() -> None:
    probe = Probe()
    per_job = Restart("RestartJob", "BackoffLimitExceeded", "train-w-1", "", False, 0)
    probe.timeline.passed(KEY, snapshot(0, job(0, 0)), status_plan(restart=per_job))
    assert probe.started("teardown") is None
    assert probe.observed("detect") == (0.0, 0.0)


def test_a_restart_found_in_progress_after_a_failover_is_picked_up_from_its_condition() -> None:
    probe = Probe()
    since = datetime(2025, 6, 1, 11, 0, 0, tzinfo=UTC)
    probe.timeline.passed(
        KEY,
        snapshot(0, job(0, 0), conditions=[restarting("True", "DefaultFailurePolicy")]),
        Plan(),
    )
    assert probe.started("teardown") == since.timestamp()
    assert probe.observed("detect") == (0.0, 0.0)


def test_a_jobset_that_fails_or_suspends_or_goes_ends_its_restart_unobserved() -> None:
    for end in ("failed", "suspended", "deleted"):
        probe = Probe()
        probe.timeline.passed(KEY, snapshot(0, job(0, 0), restarts=0), status_plan(restart=RESTART))
        if end == "failed":
            failed = {
                "type": "Failed",
                "status": "True",
                "reason": "x",
                "message": "",
                "lastTransitionTime": "t",
            }
            probe.timeline.passed(KEY, snapshot(5, job(0, 0)), status_plan(failed))
        elif end == "suspended":
            probe.timeline.passed(KEY, snapshot(5, job(0, 0), suspend=True), Plan())
        else:
            probe.timeline.forget(KEY)
        assert probe.started("teardown") is None, end
        assert probe.observed("teardown") == (0.0, 0.0), end


def test_a_new_restart_replaces_one_in_progress() -> None:
    probe = Probe()
    probe.timeline.passed(KEY, snapshot(0, restarts=0), status_plan(restart=RESTART))
    probe.timeline.passed(KEY, snapshot(31), Plan())
    second = Restart("RestartJobSet", "BackoffLimitExceeded", "train-w-0", "", True, 2)
    probe.timeline.passed(KEY, snapshot(40, job(0, 1), job(1, 1)), status_plan(restart=second))
    assert probe.started("create") is None
    assert probe.started("teardown") == (T0 + timedelta(seconds=40)).timestamp()
