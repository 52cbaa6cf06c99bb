"""The active deadline (KEP-1186, gate JobSetActiveDeadlineSeconds): one test per rule of
docs/behaviour.md#active-deadline, on the pure reconcile."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import FeatureGates, JobSet
from jobset_controller.reconcile import Plan, Snapshot, reconcile
from jobset_controller.reconcile.catalogue import DEADLINE_EXCEEDED_REASON

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

DEADLINE = FeatureGates(active_deadline_seconds=True)
MESSAGE_600 = "JobSet was active for longer than the specified deadline of 600 seconds"


def workers(kit: Kit, replicas: int = 2) -> JobSetBuilder:
    return kit.jobset().replicated_job("w", replicas=replicas)


def started(kit: Kit, builder: JobSetBuilder, at: str | None = None) -> JobSetBuilder:
    """``builder`` with a stored ``startTime`` (ten minutes before ``kit.now`` by default)."""
    return builder.status(startTime=at or kit.earlier_text)


def status_of(plan: Plan) -> Mapping[str, Any]:
    assert plan.status is not None
    return plan.status


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in status_of(plan).get("conditions", [])}


def is_failed(plan: Plan) -> bool:
    if plan.status is None:
        return False
    failed = conditions(plan).get("Failed")
    return failed is not None and failed["status"] == "True"


def with_spec(snapshot: Snapshot, **fields: Any) -> Snapshot:
    """The user (or Kueue) changed spec fields; None removes one."""
    wire = snapshot.jobset.to_dict()
    for key, value in fields.items():
        if value is None:
            wire["spec"].pop(key, None)
        else:
            wire["spec"][key] = value
    return dataclasses.replace(snapshot, jobset=JobSet.model_validate(wire))


def start_time(snapshot: Snapshot) -> str | None:
    return snapshot.jobset.status.start_time


# --- the gate -----------------------------------------------------------------------------------


def test_gate_off_writes_no_start_time_even_with_a_deadline_set(kit: Kit) -> None:
    snapshot, plan = kit.settle(
        kit.snapshot(workers(kit).active_deadline(1), service=kit.service())
    )
    assert "startTime" not in snapshot.jobset.to_dict()["status"]
    assert plan.requeue_after is None
    assert len(snapshot.jobs) == 2


@pytest.mark.parametrize("suspended", [False, True], ids=["running", "suspended"])
def test_gate_off_leaves_a_stored_start_time_as_it_was(kit: Kit, suspended: bool) -> None:
    builder = started(kit, workers(kit).suspend(suspended), at="2020-01-01T00:00:00Z")
    plan = kit.reconcile(builder, service=kit.service())
    assert status_of(plan)["startTime"] == "2020-01-01T00:00:00Z"


def test_gate_off_never_enforces_a_passed_deadline_and_plans_as_without_the_field(
    kit: Kit,
) -> None:
    plain = started(kit, workers(kit), at="2020-01-01T00:00:00Z")
    jobs = kit.running(plain)
    with_deadline = plain.copy().active_deadline(1)
    plan = kit.reconcile(with_deadline, *jobs, service=kit.service())
    assert not is_failed(plan)
    assert plan == kit.reconcile(plain, *jobs, service=kit.service())


# --- startTime ----------------------------------------------------------------------------------


def test_without_a_deadline_start_time_is_still_kept_and_nothing_expires(kit: Kit) -> None:
    builder = started(kit, workers(kit), at="2020-01-01T00:00:00Z")
    plan = kit.reconcile(builder, *kit.running(builder), service=kit.service(), features=DEADLINE)
    assert status_of(plan)["startTime"] == "2020-01-01T00:00:00Z"
    assert not is_failed(plan)
    assert plan.requeue_after is None
    first = kit.reconcile(workers(kit), service=kit.service(), features=DEADLINE)
    assert status_of(first)["startTime"] == kit.now_text


def test_the_first_start_sets_start_time_to_now(kit: Kit) -> None:
    plan = kit.reconcile(workers(kit).active_deadline(60), service=kit.service(), features=DEADLINE)
    assert status_of(plan)["startTime"] == kit.now_text
    assert len(plan.jobs_to_create) == 2
    assert plan.requeue_after == 60.0


def test_a_jobset_not_started_yet_is_not_expired_however_old_its_jobs(kit: Kit) -> None:
    """No startTime (the gate was just turned on, or the write that set it was lost): the clock
    starts now, whatever the age of the Jobs."""
    builder = workers(kit).active_deadline(1)
    plan = kit.reconcile(builder, *kit.running(builder), service=kit.service(), features=DEADLINE)
    assert not is_failed(plan)
    assert status_of(plan)["startTime"] == kit.now_text
    assert plan.requeue_after == 1.0


def test_an_unreadable_start_time_is_replaced_by_now(kit: Kit) -> None:
    builder = started(kit, workers(kit).active_deadline(30), at="yesterday")
    plan = kit.reconcile(builder, *kit.running(builder), service=kit.service(), features=DEADLINE)
    assert status_of(plan)["startTime"] == kit.now_text
    assert plan.requeue_after == 30.0


def test_a_suspended_jobset_does_not_expire_and_loses_its_start_time(kit: Kit) -> None:
    builder = started(kit, workers(kit).suspend().active_deadline(1))
    jobs = kit.running(builder, suspended=True, state="pending")
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=DEADLINE)
    assert not is_failed(plan)
    assert "startTime" not in status_of(plan)
    assert plan.requeue_after is None
    assert plan.jobs_to_delete == ()


def test_a_resume_starts_the_clock_again_since_a_suspension_cleared_it(kit: Kit) -> None:
    queued = kit.snapshot(
        workers(kit).suspend().active_deadline(600), service=kit.service(), features=DEADLINE
    )
    snapshot, _ = kit.settle(queued)
    assert start_time(snapshot) is None, "a JobSet created suspended has not started"
    seen = []
    for minutes in (5, 20):
        resumed = with_spec(snapshot, suspend=False)
        snapshot, plan = kit.settle(
            dataclasses.replace(resumed, now=kit.now + timedelta(minutes=minutes))
        )
        seen.append(start_time(snapshot))
        assert plan.requeue_after == 600.0
        preempted = dataclasses.replace(with_spec(snapshot, suspend=True), now=snapshot.now)
        snapshot, _ = kit.settle(preempted)
        assert start_time(snapshot) is None
    assert seen == ["2025-06-01T12:05:00Z", "2025-06-01T12:20:00Z"]


@pytest.mark.parametrize("action", ["RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"])
def test_a_global_restart_resets_start_time(kit: Kit, action: str) -> None:
    builder = started(kit, workers(kit).active_deadline(3600))
    builder.failure_policy({"name": "again", "action": action}, max_restarts=3)
    jobs = (kit.job("w", 0, state="failed"), kit.job("w", 1))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=DEADLINE)
    assert status_of(plan)["restarts"] == 1
    assert status_of(plan)["startTime"] == kit.now_text
    assert plan.requeue_after == 3600.0


@pytest.mark.parametrize("action", ["RestartJob", "RestartJobAndIgnoreMaxRestarts"])
def test_restarting_one_job_leaves_start_time(kit: Kit, action: str) -> None:
    gates = dataclasses.replace(DEADLINE, restart_job=True)
    builder = started(kit, workers(kit).active_deadline(3600))
    builder.failure_policy({"name": "one", "action": action}, max_restarts=3)
    jobs = (kit.job("w", 0, state="failed"), kit.job("w", 1))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=gates)
    status = status_of(plan)
    assert status["restarts"] == 0
    assert [entry["jobRestarts"] for entry in status["replicatedJobsStatus"]] == [[1, 0]]
    assert status["startTime"] == kit.earlier_text
    assert plan.requeue_after == 3000.0


# --- before the deadline ------------------------------------------------------------------------


def test_a_running_deadline_only_asks_to_be_woken_when_it_passes(kit: Kit) -> None:
    start = kit.snapshot(
        workers(kit).active_deadline(900), service=kit.service(), features=DEADLINE
    )
    steady, _ = kit.settle(start)
    later = dataclasses.replace(steady, now=kit.now + timedelta(seconds=600))
    plan = reconcile(later)
    assert kit.has_no_writes(plan)
    assert plan.requeue_after == 300.0


@pytest.mark.parametrize(
    ("deadline", "requeue"), [(10, 0.5), (100, 1.0)], ids=["deadline first", "cut pass first"]
)
def test_the_earlier_of_two_requeues_wins(kit: Kit, deadline: int, requeue: float) -> None:
    """A pass cut short by the create bound asks for 1 s; a deadline 0.5 s away asks for less."""
    builder = started(kit, kit.jobset().replicated_job("w", replicas=1001), at=kit.now_text)
    builder.active_deadline(deadline)
    plan = kit.reconcile(
        builder, service=kit.service(), features=DEADLINE, now=kit.now + timedelta(seconds=9.5)
    )
    assert len(plan.jobs_to_create) == 1000
    assert plan.requeue_after == requeue


def test_a_running_deadline_keeps_failure_before_success(kit: Kit) -> None:
    builder = started(kit, workers(kit).active_deadline(3600)).success_policy("Any")
    jobs = (kit.job("w", 0, state="failed"), kit.job("w", 1, state="succeeded"))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=DEADLINE)
    assert conditions(plan)["Failed"]["reason"] == "FailedJobs"
    assert "Completed" not in conditions(plan)


def test_a_start_time_in_the_future_has_not_expired(kit: Kit) -> None:
    """Clock skew: another replica, its clock an hour ahead, wrote the start time."""
    ahead = (kit.now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    builder = started(kit, workers(kit).active_deadline(60), at=ahead)
    plan = kit.reconcile(builder, *kit.running(builder), service=kit.service(), features=DEADLINE)
    assert not is_failed(plan)
    assert plan.requeue_after == 3660.0


@pytest.mark.parametrize(
    "seconds", [2**63 - 1, 10**12], ids=["int64 max (timedelta overflows)", "past year 9999"]
)
def test_a_deadline_too_far_for_a_datetime_never_expires(kit: Kit, seconds: int) -> None:
    builder = started(kit, workers(kit).active_deadline(seconds))
    plan = kit.reconcile(builder, *kit.running(builder), service=kit.service(), features=DEADLINE)
    assert not is_failed(plan)
    assert plan.requeue_after is None


# --- once it passed -----------------------------------------------------------------------------


def test_a_passed_deadline_fails_the_jobset_and_deletes_its_active_jobs_in_the_same_pass(
    kit: Kit,
) -> None:
    builder = started(kit, workers(kit).active_deadline(600))
    builder.condition("RestartingJobSet", "True", "DefaultFailurePolicy")
    jobs = kit.running(builder)
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=DEADLINE)
    failed = conditions(plan)["Failed"]
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True",
        DEADLINE_EXCEEDED_REASON,
        MESSAGE_600,
    )
    assert failed["lastTransitionTime"] == kit.now_text
    assert conditions(plan)["RestartingJobSet"]["reason"] == "JobSetFailed"
    assert status_of(plan)["terminalState"] == "Failed"
    assert status_of(plan)["startTime"] == kit.earlier_text
    assert sorted(delete.name for delete in plan.jobs_to_delete) == ["trainer-w-0", "trainer-w-1"]
    assert (plan.jobs_to_create, plan.jobs_to_patch) == ((), ())
    assert (plan.failed, plan.deadline_exceeded, plan.completed) == (True, True, False)
    assert ("Warning", DEADLINE_EXCEEDED_REASON, MESSAGE_600) in [
        (event.type, event.reason, event.note) for event in plan.events
    ]
    assert plan.requeue_after is None


def test_the_failing_pass_also_deletes_the_previous_attempts_jobs(kit: Kit) -> None:
    builder = started(kit, workers(kit).active_deadline(600)).status(restarts=1)
    old = kit.job("w", 0, restart_attempt=0, uid="old-0")
    current = kit.job("w", 0, restart_attempt=1, uid="new-0")
    plan = kit.reconcile(builder, old, current, service=kit.service(), features=DEADLINE)
    assert is_failed(plan)
    assert sorted(delete.uid for delete in plan.jobs_to_delete) == ["new-0", "old-0"]


def test_a_passed_deadline_is_not_restarted_by_the_failure_policy(kit: Kit) -> None:
    builder = started(kit, workers(kit).active_deadline(600))
    builder.failure_policy({"name": "again", "action": "RestartJobSet"}, max_restarts=5)
    jobs = (kit.job("w", 0, state="failed"), kit.job("w", 1))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=DEADLINE)
    assert conditions(plan)["Failed"]["reason"] == DEADLINE_EXCEEDED_REASON
    assert status_of(plan)["restarts"] == 0
    assert "RestartingJobSet" not in conditions(plan)
    assert "RestartJobSetFailurePolicyAction" not in [event.reason for event in plan.events]
    assert [delete.name for delete in plan.jobs_to_delete] == ["trainer-w-1"]


@pytest.mark.parametrize("other", ["active", "failed"])
def test_a_passed_deadline_still_completes_a_jobset_whose_success_policy_is_met(
    kit: Kit, other: str
) -> None:
    builder = started(kit, workers(kit).active_deadline(600)).success_policy("Any")
    jobs = (kit.job("w", 0, state="succeeded"), kit.job("w", 1, state=other))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=DEADLINE)
    assert conditions(plan)["Completed"]["status"] == "True"
    assert "Failed" not in conditions(plan)
    assert (plan.completed, plan.failed, plan.deadline_exceeded) == (True, False, False)


def test_the_failure_is_decided_once_and_counted_by_its_own_pass_only(kit: Kit) -> None:
    builder = started(kit, workers(kit).active_deadline(600))
    snapshot = kit.snapshot(
        builder, *kit.running(builder), service=kit.service(), features=DEADLINE
    )
    plan = reconcile(snapshot)
    assert plan.deadline_exceeded
    after = kit.apply_plan(snapshot, plan)
    assert after is not None
    again = reconcile(dataclasses.replace(after, now=kit.now + timedelta(hours=1)))
    assert (again.failed, again.deadline_exceeded) == (False, False)
    if again.status is not None:  # only the counts of the deleted Jobs may still change
        assert conditions(again) == conditions(plan)


@pytest.mark.parametrize(
    ("condition", "reason"), [("Completed", "AllJobsCompleted"), ("Failed", "FailedJobs")]
)
def test_a_finished_jobset_is_not_failed_again(kit: Kit, condition: str, reason: str) -> None:
    builder = started(kit, workers(kit).active_deadline(1), at="2020-01-01T00:00:00Z")
    builder.condition(condition, reason=reason).status(terminalState=condition)
    entry = {"name": "w", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    builder.status(replicatedJobsStatus=[entry])
    plan = kit.reconcile(builder, service=kit.service(), features=DEADLINE)
    assert plan.status is None
    assert (plan.failed, plan.deadline_exceeded, plan.requeue_after) == (False, False, None)


def test_a_jobset_managed_by_another_controller_is_left_alone(kit: Kit) -> None:
    builder = started(kit, workers(kit).active_deadline(1)).managed_by("kueue.x-k8s.io/multikueue")
    assert kit.reconcile(builder, *kit.running(builder), features=DEADLINE) == Plan()


# --- the field is mutable -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "fails", "requeue"),
    [(300, True, None), (7200, False, 6600.0), (None, False, None)],
    ids=["lowered below the time run", "raised", "removed"],
)
def test_each_pass_reads_the_current_deadline(
    kit: Kit, seconds: int | None, fails: bool, requeue: float | None
) -> None:
    start = kit.snapshot(
        started(kit, workers(kit).active_deadline(3600)), service=kit.service(), features=DEADLINE
    )
    steady, plan = kit.settle(start)
    assert plan.requeue_after == 3000.0
    plan = reconcile(with_spec(steady, activeDeadlineSeconds=seconds))
    assert is_failed(plan) is fails
    assert plan.requeue_after == requeue


def test_a_deadline_added_to_a_running_jobset_counts_from_its_start(kit: Kit) -> None:
    start = kit.snapshot(started(kit, workers(kit)), service=kit.service(), features=DEADLINE)
    steady, plan = kit.settle(start)
    assert plan.requeue_after is None
    assert is_failed(reconcile(with_spec(steady, activeDeadlineSeconds=600)))
