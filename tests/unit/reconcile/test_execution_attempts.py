"""Execution attempts (KEP-1282, gate ExecutionAttemptsTracking): one test per guarantee of
docs/behaviour.md#execution-attempts, on the pure reconcile."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobset_controller.api import EXECUTION_ATTEMPT_KEY, FeatureGates, JobSet
from jobset_controller.reconcile import Plan, Snapshot, reconcile

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

TRACKING = FeatureGates(execution_attempts_tracking=True)


def workers(kit: Kit, replicas: int = 2) -> JobSetBuilder:
    return kit.jobset().replicated_job("w", replicas=replicas)


def with_suspend(snapshot: Snapshot, suspend: bool) -> Snapshot:
    """What Kueue does: flip spec.suspend (preemption or admission)."""
    wire = snapshot.jobset.to_dict()
    wire["spec"]["suspend"] = suspend
    return dataclasses.replace(snapshot, jobset=JobSet.model_validate(wire))


def attempts(snapshot: Snapshot) -> int | None:
    return snapshot.jobset.status.execution_attempts


def pod_attempt(job: Mapping[str, Any]) -> str | None:
    annotations = job["spec"]["template"].get("metadata", {}).get("annotations") or {}
    value = annotations.get(EXECUTION_ATTEMPT_KEY)
    return None if value is None else str(value)


def job_attempt(job: Mapping[str, Any]) -> str | None:
    value = (job["metadata"].get("annotations") or {}).get(EXECUTION_ATTEMPT_KEY)
    return None if value is None else str(value)


def status_of(plan: Plan) -> Mapping[str, Any]:
    assert plan.status is not None
    return plan.status


def test_gate_off_writes_no_count_and_no_annotation(kit: Kit) -> None:
    snapshot, _ = kit.settle(kit.snapshot(workers(kit), service=kit.service()))
    assert "executionAttempts" not in snapshot.jobset.to_dict()["status"]
    assert all(pod_attempt(job) is None and job_attempt(job) is None for job in snapshot.jobs)


def test_gate_off_leaves_a_stored_count_as_it_was(kit: Kit) -> None:
    builder = workers(kit)
    builder.status(executionAttempts=3).condition("Suspended", "True", "SuspendedJobs")
    jobs = kit.running(builder, suspended=True, state="pending")
    plan = kit.reconcile(builder, *jobs, service=kit.service())
    assert {patch.reason for patch in plan.jobs_to_patch} == {"resume"}
    assert status_of(plan)["executionAttempts"] == 3
    assert all(EXECUTION_ATTEMPT_KEY not in str(patch.patch) for patch in plan.jobs_to_patch)


def test_a_new_running_jobset_is_attempt_zero_on_its_jobs_and_pods(kit: Kit) -> None:
    plan = kit.reconcile(workers(kit), service=kit.service(), features=TRACKING)
    assert status_of(plan)["executionAttempts"] == 0
    assert [pod_attempt(job) for job in plan.jobs_to_create] == ["0", "0"]
    assert [job_attempt(job) for job in plan.jobs_to_create] == ["0", "0"]


def test_a_jobset_created_suspended_is_uncounted_until_its_first_resume_which_is_zero(
    kit: Kit,
) -> None:
    start = kit.snapshot(workers(kit).suspend(), service=kit.service(), features=TRACKING)
    queued, _ = kit.settle(start)
    assert attempts(queued) is None
    assert [pod_attempt(job) for job in queued.jobs] == ["0", "0"]
    admitted, _ = kit.settle(with_suspend(queued, False))
    assert attempts(admitted) == 0
    assert [pod_attempt(job) for job in admitted.jobs] == ["0", "0"]


def test_each_resume_after_a_suspension_starts_the_next_attempt(kit: Kit) -> None:
    start = kit.snapshot(workers(kit).suspend(), service=kit.service(), features=TRACKING)
    snapshot, _ = kit.settle(with_suspend(kit.settle(start)[0], False))
    seen = [attempts(snapshot)]
    for _ in range(2):
        snapshot, _ = kit.settle(with_suspend(snapshot, True))  # preempted
        assert attempts(snapshot) == seen[-1], "a suspension does not count"
        snapshot, _ = kit.settle(with_suspend(snapshot, False))  # readmitted
        seen.append(attempts(snapshot))
        assert {pod_attempt(job) for job in snapshot.jobs} == {str(seen[-1])}
        assert {job_attempt(job) for job in snapshot.jobs} == {str(seen[-1])}
    assert seen == [0, 1, 2]


def test_the_attempt_is_written_in_the_patch_that_resumes_the_job(kit: Kit) -> None:
    builder = workers(kit)
    builder.status(executionAttempts=4).condition("Suspended", "True", "SuspendedJobs")
    jobs = kit.running(builder, suspended=True, state="pending")
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=TRACKING)
    assert status_of(plan)["executionAttempts"] == 5
    for patch in plan.jobs_to_patch:
        assert patch.patch["spec"]["suspend"] is False
        assert patch.patch["metadata"]["annotations"] == {EXECUTION_ATTEMPT_KEY: "5"}
        pod_annotations = patch.patch["spec"]["template"]["metadata"]["annotations"]
        assert pod_annotations[EXECUTION_ATTEMPT_KEY] == "5"


def test_a_resume_whose_status_write_failed_is_counted_once(kit: Kit) -> None:
    builder = workers(kit)
    builder.status(executionAttempts=1).condition("Suspended", "True", "SuspendedJobs")
    jobs = kit.running(builder, suspended=True, state="pending")
    snapshot = kit.snapshot(builder, *jobs, service=kit.service(), features=TRACKING)
    plan = reconcile(snapshot)
    # The Job patches landed, the status write did not (a conflict): the next pass decides again.
    patched = kit.apply_plan(snapshot, dataclasses.replace(plan, status=None, events=()))
    assert patched is not None
    assert attempts(patched) == 1
    again = reconcile(patched)
    assert status_of(again)["executionAttempts"] == 2


def test_an_in_order_resume_over_several_passes_counts_once(kit: Kit) -> None:
    builder = (
        kit.jobset()
        .replicated_job("a", replicas=1)
        .replicated_job("b", replicas=1)
        .in_order()
        .suspend()
    )
    start = kit.snapshot(builder, service=kit.service(), features=TRACKING)
    snapshot, _ = kit.settle(with_suspend(kit.settle(start)[0], False))
    snapshot, _ = kit.settle(with_suspend(snapshot, True))
    snapshot = with_suspend(snapshot, False)
    counted = []
    for _ in range(6):
        plan = reconcile(snapshot)
        applied = kit.apply_plan(snapshot, plan)
        assert applied is not None
        # InOrder: b resumes only once a is ready; make every running Job ready.
        snapshot = dataclasses.replace(applied, jobs=tuple(_ready(job) for job in applied.jobs))
        counted.append(attempts(snapshot))
    assert set(counted) == {1}
    assert {pod_attempt(job) for job in snapshot.jobs} == {"1"}


def _ready(job: Mapping[str, Any]) -> Mapping[str, Any]:
    if job["spec"].get("suspend"):
        return job
    return {**job, "status": {"active": 1, "ready": 1}}


def test_a_global_restart_starts_the_next_attempt(kit: Kit) -> None:
    builder = workers(kit).failure_policy(max_restarts=3).status(executionAttempts=2)
    jobs = (kit.job("w", 0, state="failed"), kit.job("w", 1))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=TRACKING)
    assert (status_of(plan)["restarts"], status_of(plan)["executionAttempts"]) == (1, 3)


def test_the_jobs_of_a_restart_carry_its_attempt(kit: Kit) -> None:
    builder = workers(kit).failure_policy(max_restarts=3).status(executionAttempts=2)
    snapshot = kit.snapshot(
        builder,
        kit.job("w", 0, state="failed"),
        kit.job("w", 1),
        service=kit.service(),
        features=TRACKING,
    )
    settled, _ = kit.settle(snapshot)
    assert attempts(settled) == 3
    assert [pod_attempt(job) for job in settled.jobs] == ["3", "3"]


def test_a_restart_during_an_in_order_resume_is_not_counted_again_as_a_resume(kit: Kit) -> None:
    builder = (
        kit.jobset()
        .replicated_job("a", replicas=1)
        .replicated_job("b", replicas=1)
        .in_order()
        .failure_policy(max_restarts=3)
        .status(executionAttempts=1, restarts=0)
        .condition("Suspended", "True", "SuspendedJobs")
    )
    # a resumed as attempt 1 and failed; b still suspended: the restart makes attempt 2.
    failed = kit.job("a", 0, state="failed", pod_template=_annotated("1"))
    waiting = kit.job("b", 0, suspended=True, state="pending", pod_template=_annotated("1"))
    snapshot = kit.snapshot(builder, failed, waiting, service=kit.service(), features=TRACKING)
    for _ in range(4):
        applied = kit.apply_plan(snapshot, reconcile(snapshot))
        assert applied is not None
        snapshot = applied
    assert attempts(snapshot) == 2
    assert {pod_attempt(job) for job in snapshot.jobs} == {"2"}


def _annotated(value: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {EXECUTION_ATTEMPT_KEY: value}}}


def test_restarting_one_job_is_not_a_new_attempt(kit: Kit) -> None:
    gates = FeatureGates(execution_attempts_tracking=True, restart_job=True)
    rule = {"action": "RestartJob", "onJobFailureReasons": []}
    builder = workers(kit).failure_policy(rule, max_restarts=3).status(executionAttempts=2)
    jobs = (
        kit.job("w", 0, state="failed", job_restart_attempt=0),
        kit.job("w", 1, job_restart_attempt=0),
    )
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=gates)
    assert status_of(plan)["executionAttempts"] == 2


def test_an_upgraded_running_jobset_starts_counting_at_its_restarts(kit: Kit) -> None:
    builder = workers(kit).status(restarts=2)
    jobs = kit.running(builder, restart_attempt=2)
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=TRACKING)
    assert status_of(plan)["executionAttempts"] == 2


def test_a_suspension_that_never_took_effect_is_not_counted(kit: Kit) -> None:
    # Suspended and resumed before any pass saw it: no Suspended=True, so nothing was stopped.
    builder = workers(kit).status(executionAttempts=1)
    jobs = kit.running(builder, pod_template=_annotated("1"))
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=TRACKING)
    assert plan.status is None or plan.status["executionAttempts"] == 1


def test_a_finished_jobset_is_not_counted_after_an_upgrade(kit: Kit) -> None:
    builder = workers(kit).condition("Completed", "True", "AllJobsCompleted")
    builder.status(terminalState="Completed")
    jobs = kit.running(builder, state="succeeded")
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=TRACKING)
    assert plan.status is None or "executionAttempts" not in plan.status
