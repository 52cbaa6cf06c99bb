"""Deferred children (Configuration ``deferredChildren.enable``): one test per guarantee of
docs/behaviour.md#deferred-children, on the pure reconcile."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobset_controller.api import EXECUTION_ATTEMPT_KEY, FeatureGates, JobSet
from jobset_controller.reconcile import Snapshot, reconcile

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit


def queued(kit: Kit) -> JobSetBuilder:
    """What Kueue makes of a submitted JobSet: suspended, waiting for admission."""
    return (
        kit.jobset()
        .replicated_job("leader", replicas=1)
        .replicated_job("workers", replicas=3, depends_on=None)
        .network(enableDNSHostnames=True)
        .suspend()
    )


def deferring(snapshot: Snapshot) -> Snapshot:
    return dataclasses.replace(snapshot, defer_children=True)


def with_spec(snapshot: Snapshot, **spec: Any) -> Snapshot:
    wire = snapshot.jobset.to_dict()
    wire["spec"].update(spec)
    return dataclasses.replace(snapshot, jobset=JobSet.model_validate(wire))


def resumed(snapshot: Snapshot) -> Snapshot:
    return with_spec(snapshot, suspend=False)


def status_without_times(snapshot: Snapshot) -> dict[str, Any]:
    status = snapshot.jobset.to_dict().get("status") or {}
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    return {**status, "conditions": conditions}


def test_option_off_a_queued_jobset_has_its_suspended_jobs_and_service(kit: Kit) -> None:
    settled, _ = kit.settle(kit.snapshot(queued(kit)))
    assert len(settled.jobs) == 4
    assert all(job["spec"]["suspend"] is True for job in settled.jobs)
    assert settled.service is not None


def test_a_suspended_jobset_that_never_ran_gets_no_jobs_and_no_service(kit: Kit) -> None:
    settled, _ = kit.settle(deferring(kit.snapshot(queued(kit))))
    assert settled.jobs == ()
    assert settled.service is None


def test_its_status_is_the_one_its_suspended_jobs_would_give(kit: Kit) -> None:
    upstream, _ = kit.settle(kit.snapshot(queued(kit)))
    deferred, _ = kit.settle(deferring(kit.snapshot(queued(kit))))
    assert status_without_times(deferred) == status_without_times(upstream)
    entries = {e["name"]: e for e in status_without_times(deferred)["replicatedJobsStatus"]}
    assert (entries["leader"]["suspended"], entries["workers"]["suspended"]) == (1, 3)
    kinds = {(c["type"], c["status"]) for c in status_without_times(deferred)["conditions"]}
    assert ("Suspended", "True") in kinds


def test_jobs_waiting_for_a_dependency_count_as_upstream_counts_them(kit: Kit) -> None:
    builder = (
        kit.jobset()
        .replicated_job("init", replicas=1)
        .replicated_job("workers", replicas=2, depends_on=[("init", "Complete")])
        .suspend()
    )
    upstream, _ = kit.settle(kit.snapshot(builder))
    deferred, _ = kit.settle(deferring(kit.snapshot(builder)))
    assert status_without_times(deferred) == status_without_times(upstream)


def test_the_first_resume_creates_running_jobs_from_the_current_spec_and_the_service(
    kit: Kit,
) -> None:
    waiting, _ = kit.settle(deferring(kit.snapshot(queued(kit))))
    # Kueue's admission: the flavor's nodeSelector written into the templates, then resumed.
    wire = waiting.jobset.to_dict()
    for rjob in wire["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"rack": "rack-1"}
    wire["spec"]["suspend"] = False
    admitted = dataclasses.replace(waiting, jobset=JobSet.model_validate(wire))
    plan = reconcile(admitted)
    assert plan.service_to_create is not None
    assert len(plan.jobs_to_create) == 4
    for job in plan.jobs_to_create:
        assert job["spec"]["suspend"] is False
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {"rack": "rack-1"}
    running, _ = kit.settle(admitted)
    conditions = {c["type"]: c for c in running.jobset.to_dict()["status"]["conditions"]}
    assert (conditions["Suspended"]["status"], conditions["Suspended"]["reason"]) == (
        "False",
        "ResumeJobs",
    )


DATA = {"name": "data", "mountPath": "/data"}


def test_claims_are_created_while_the_jobs_are_deferred(kit: Kit) -> None:
    mounted = {"containers": [{"name": "main", "image": "busybox", "volumeMounts": [DATA]}]}
    builder = kit.jobset().replicated_job("w", pod_spec=mounted).volume_claim("data").suspend()
    plan = reconcile(deferring(kit.snapshot(builder)))
    assert [pvc["metadata"]["name"] for pvc in plan.pvcs_to_create] == ["data-trainer"]
    assert plan.jobs_to_create == ()


def test_a_jobset_that_ran_keeps_its_jobs_when_suspended_again(kit: Kit) -> None:
    builder = queued(kit)
    jobs = kit.running(builder)
    plan = reconcile(deferring(kit.snapshot(builder, *jobs, service=kit.service())))
    assert {patch.reason for patch in plan.jobs_to_patch} == {"suspend"}
    assert len(plan.jobs_to_patch) == 4


def test_a_jobset_that_restarted_is_not_deferred(kit: Kit) -> None:
    builder = queued(kit).status(restarts=1)
    plan = reconcile(deferring(kit.snapshot(builder, service=kit.service())))
    assert len(plan.jobs_to_create) == 4
    assert all(job["spec"]["suspend"] is True for job in plan.jobs_to_create)


def test_turning_the_option_off_gives_a_deferred_jobset_its_suspended_jobs(kit: Kit) -> None:
    deferred, _ = kit.settle(deferring(kit.snapshot(queued(kit))))
    plan = reconcile(dataclasses.replace(deferred, defer_children=False))
    assert len(plan.jobs_to_create) == 4
    assert all(job["spec"]["suspend"] is True for job in plan.jobs_to_create)
    assert plan.service_to_create is not None


def test_in_order_startup_after_the_first_resume_starts_one_replicated_job_at_a_time(
    kit: Kit,
) -> None:
    builder = queued(kit).in_order()
    waiting, _ = kit.settle(deferring(kit.snapshot(builder)))
    plan = reconcile(resumed(waiting))
    assert [job["metadata"]["name"] for job in plan.jobs_to_create] == ["trainer-leader-0"]
    conditions = {c["type"]: c["status"] for c in (plan.status or {}).get("conditions", [])}
    assert conditions["StartupPolicyInProgress"] == "True"


def test_the_first_resume_of_a_deferred_jobset_is_execution_attempt_zero(kit: Kit) -> None:
    gates = FeatureGates(execution_attempts_tracking=True)
    waiting, _ = kit.settle(deferring(kit.snapshot(queued(kit), features=gates)))
    assert waiting.jobset.status.execution_attempts is None
    plan = reconcile(resumed(waiting))
    assert (plan.status or {})["executionAttempts"] == 0
    assert {_pod_annotation(job) for job in plan.jobs_to_create} == {"0"}


def _pod_annotation(job: Mapping[str, Any]) -> str:
    return str(job["spec"]["template"]["metadata"]["annotations"][EXECUTION_ATTEMPT_KEY])


def test_a_deferred_jobset_writes_nothing_once_its_status_is_written(kit: Kit) -> None:
    _, last = kit.settle(deferring(kit.snapshot(queued(kit))))
    assert kit.has_no_writes(last)
