"""The pass as a whole: what stops it early, what a finished JobSet does, rejection, steadiness."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import FeatureGates, FieldError, JobSet
from jobset_controller.reconcile import Plan, Snapshot, reconcile
from jobset_controller.reconcile.catalogue import (
    IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE,
    IN_PLACE_RESTART_NOT_SUPPORTED_REASON,
    VALIDATION_FAILED_REASON,
)
from jobset_controller.reconcile.job_creation import MAX_JOB_CREATES_PER_PASS
from jobset_controller.reconcile.rejection import validation_message
from jobset_controller.reconcile.steps import CONTINUE_AFTER_SECONDS, MAX_JOB_DELETES_PER_PASS

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    status = plan.status or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def two_rjobs(kit: Kit) -> JobSetBuilder:
    return kit.jobset().replicated_job("leader").replicated_job("workers", replicas=2)


# --- early stops --------------------------------------------------------------------------------


def test_jobset_being_deleted_gets_an_empty_plan(kit: Kit) -> None:
    builder = two_rjobs(kit).deleting()
    assert kit.reconcile(builder, kit.job("workers", 0, state="failed")).is_empty()


@pytest.mark.parametrize(
    ("manager", "reconciled"),
    [
        ("kueue.x-k8s.io/multikueue", False),
        ("", False),
        ("jobset.sigs.k8s.io/jobset-controller", True),
    ],
    ids=[
        "another controller's jobset is ignored",
        "an explicitly empty manager is another controller",
        "the reserved name is this controller",
    ],
)
def test_managed_by(kit: Kit, manager: str, reconciled: bool) -> None:
    builder = two_rjobs(kit).managed_by(manager)
    builder.status(restarts=5, futureField="kept")
    plan = kit.reconcile(builder, kit.job("workers", 0, state="failed"))
    assert plan.is_empty() is not reconciled


# --- finished -----------------------------------------------------------------------------------


def test_finished_jobset_deletes_only_its_active_jobs(kit: Kit) -> None:
    builder = two_rjobs(kit).condition("Completed", reason="AllJobsCompleted")
    plan = kit.reconcile(
        builder,
        kit.job("leader", 0, state="succeeded"),
        kit.job("workers", 0, state="ready"),
        kit.job("workers", 1, state="active", deleting=True),
        kit.job("workers", 2, state="failed"),
        kit.job("workers", 3, restart_attempt=0),
    )
    assert [(d.name, d.uid) for d in plan.jobs_to_delete] == [
        ("trainer-workers-0", "uid-trainer-workers-0-0"),
        ("trainer-workers-3", "uid-trainer-workers-3-0"),
    ]
    assert plan.jobs_to_create == ()
    assert plan.service_to_create is None
    assert plan.jobs_to_patch == ()


def test_finished_jobset_is_not_judged_again(kit: Kit) -> None:
    builder = two_rjobs(kit).condition("Failed", reason="FailedJobs")
    builder.status(terminalState="Failed")
    plan = kit.reconcile(builder, kit.job("workers", 0, state="succeeded"))
    assert "Completed" not in conditions(plan)
    assert not plan.completed
    assert not plan.failed


def test_running_jobset_deletes_previous_attempt_jobs_not_yet_deleting(kit: Kit) -> None:
    builder = two_rjobs(kit).status(restarts=2, restartsCountTowardsMax=2)
    plan = kit.reconcile(
        builder,
        kit.job("workers", 0, restart_attempt=1),
        kit.job("workers", 1, restart_attempt=0, deleting=True),
        kit.job("leader", 0, restart_attempt=2),
    )
    assert [d.name for d in plan.jobs_to_delete] == ["trainer-workers-0"]
    assert plan.jobs_to_create == ()


# --- rejection ----------------------------------------------------------------------------------


def invalid(kit: Kit) -> JobSetBuilder:
    return (
        kit.jobset()
        .replicated_job("leader", depends_on=[("leader", "Ready")])
        .replicated_job("workers", group_name="Not_A_Label")
    )


def test_invalid_jobset_fails_with_validation_failed(kit: Kit) -> None:
    plan = kit.reconcile(invalid(kit))
    failed = conditions(plan)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", VALIDATION_FAILED_REASON)
    assert failed["message"].startswith("jobset is invalid: ")
    assert "spec.replicatedJobs[0].dependsOn" in failed["message"]
    assert "DependsOn can't be set for the first ReplicatedJob" in failed["message"]
    assert "spec.replicatedJobs[1].groupName" in failed["message"]
    assert plan.status is not None
    assert plan.status["terminalState"] == "Failed"
    assert [(e.type, e.reason, e.note, e.after_status) for e in plan.events] == [
        ("Warning", VALIDATION_FAILED_REASON, failed["message"], True)
    ]
    assert plan.failed
    assert plan.jobs_to_create == ()
    assert plan.service_to_create is None
    assert plan.pvcs_to_create == ()


def test_invalid_jobset_settles_after_failing(kit: Kit) -> None:
    snapshot, plan = kit.settle(kit.snapshot(invalid(kit)))
    assert plan.is_empty()
    assert snapshot.jobs == ()
    assert conditions_of(snapshot)["Failed"]["reason"] == VALIDATION_FAILED_REASON


def test_create_checks_are_not_repeated_once_the_jobset_runs(kit: Kit) -> None:
    # Like upstream's update webhook: a JobSet that already has Jobs (it was admitted and ran)
    # is not failed by create-time checks after a legal update, e.g. a new coordinator whose
    # pod index the create checks would refuse.
    builder = kit.jobset().replicated_job("workers", replicas=1)
    builder.coordinator("workers", job_index=0, pod_index=5)
    plan = kit.reconcile(builder, kit.job("workers", 0))
    assert "Failed" not in conditions(plan)
    assert not plan.failed


def conditions_of(snapshot: Any) -> dict[str, dict[str, Any]]:
    status = snapshot.jobset.status
    return {c.type: c.to_dict() for c in (status.conditions if status else ())}


def test_in_place_restart_with_its_gate_off_is_not_supported(kit: Kit) -> None:
    builder = two_rjobs(kit).failure_policy(max_restarts=3, restart_strategy="InPlaceRestart")
    plan = kit.reconcile(builder, features=FeatureGates())
    failed = conditions(plan)["Failed"]
    assert (failed["reason"], failed["message"]) == (
        IN_PLACE_RESTART_NOT_SUPPORTED_REASON,
        IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE,
    )
    assert [(e.type, e.reason) for e in plan.events] == [
        ("Warning", IN_PLACE_RESTART_NOT_SUPPORTED_REASON)
    ]
    assert plan.jobs_to_create == ()


def test_restart_job_rule_with_the_gate_off_is_not_a_validation_failure(kit: Kit) -> None:
    builder = two_rjobs(kit).failure_policy({"action": "RestartJob", "name": "r"})
    plan = kit.reconcile(builder)
    assert "Failed" not in conditions(plan)
    assert len(plan.jobs_to_create) == 3


def test_validation_message_counts_errors_that_do_not_fit() -> None:
    errors = [
        FieldError(f"spec.replicatedJobs[{i}].groupName", "Invalid", "x" * 50, "bad")
        for i in range(20)
    ]
    message = validation_message(errors, limit=400)
    assert len(message.encode()) <= 400
    assert message.startswith("jobset is invalid: spec.replicatedJobs[0].groupName: Invalid value")
    assert message.endswith("more errors")
    shown = message.count("groupName")
    assert f"... and {20 - shown} more errors" in message


def test_validation_message_within_the_condition_limit(kit: Kit) -> None:
    errors = [FieldError("spec.x", "Invalid", "é" * 1000, "v") for _ in range(100)]
    assert len(validation_message(errors).encode()) <= 32768


# --- steadiness, determinism, bounds ------------------------------------------------------------


STEADY_CASES = {
    "running jobset with all jobs created": lambda kit: two_rjobs(kit),
    "suspended jobset": lambda kit: two_rjobs(kit).suspend(),
    "in order jobset waiting for its driver": lambda kit: two_rjobs(kit).in_order(),
    "completed jobset": lambda kit: two_rjobs(kit).success_policy("Any", "leader"),
    "jobset without replicated jobs": lambda kit: kit.jobset(),
}


@pytest.mark.parametrize("make", list(STEADY_CASES.values()), ids=list(STEADY_CASES))
def test_steady_jobset_gets_an_empty_plan(kit: Kit, make: Any) -> None:
    builder: JobSetBuilder = make(kit)
    jobs = []
    if "successPolicy" in builder.wire()["spec"]:
        jobs = [kit.job("leader", 0, state="succeeded")]
    settled, plan = kit.settle(kit.snapshot(builder, *jobs))
    assert plan.is_empty()
    assert reconcile(settled).is_empty()


def test_same_snapshot_gives_the_same_plan(kit: Kit) -> None:
    snapshot = kit.snapshot(
        two_rjobs(kit).failure_policy({"action": "RestartJobSet"}, max_restarts=2),
        kit.job("workers", 0, state="failed"),
    )
    assert reconcile(snapshot) == reconcile(snapshot)


def test_the_status_write_carries_the_snapshots_resource_version(kit: Kit) -> None:
    wire = two_rjobs(kit).wire()
    wire["metadata"]["resourceVersion"] = "42"
    plan = kit.reconcile(JobSet.model_validate(wire))
    assert plan.status is not None
    assert plan.status_resource_version == "42"


def test_reconcile_does_not_modify_the_snapshot(kit: Kit) -> None:
    snapshot = kit.snapshot(two_rjobs(kit).suspend(), kit.job("workers", 0))
    before = (snapshot.jobset.to_dict(), [dict(j) for j in snapshot.jobs])
    reconcile(snapshot)
    assert (snapshot.jobset.to_dict(), [dict(j) for j in snapshot.jobs]) == before


def test_creates_are_bounded_per_pass(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w", replicas=MAX_JOB_CREATES_PER_PASS + 10)
    plan = kit.reconcile(builder)
    assert len(plan.jobs_to_create) == MAX_JOB_CREATES_PER_PASS
    assert plan.requeue_after == CONTINUE_AFTER_SECONDS


def test_deletes_are_bounded_per_pass(kit: Kit) -> None:
    count = MAX_JOB_DELETES_PER_PASS + 3
    builder = kit.jobset().replicated_job("w", replicas=count).status(restarts=1)
    jobs = [kit.job("w", i, restart_attempt=0) for i in range(count)]
    plan = kit.reconcile(builder, *jobs)
    assert len(plan.jobs_to_delete) == MAX_JOB_DELETES_PER_PASS
    assert plan.requeue_after == CONTINUE_AFTER_SECONDS


def test_status_condition_times_come_from_now(kit: Kit) -> None:
    from datetime import UTC, timedelta, timezone

    later = datetime(2030, 1, 2, 3, 4, 5, 678, tzinfo=timezone(timedelta(hours=2)))
    plan = kit.reconcile(invalid(kit), now=later)
    assert conditions(plan)["Failed"]["lastTransitionTime"] == "2030-01-02T01:04:05Z"
    assert later.astimezone(UTC).hour == 1


def test_snapshot_needs_an_aware_time(kit: Kit) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Snapshot(two_rjobs(kit).build(), (), None, datetime(2025, 1, 1))


def test_snapshot_is_frozen(kit: Kit) -> None:
    snapshot = kit.snapshot(two_rjobs(kit))
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.now = kit.now  # type: ignore[misc]
