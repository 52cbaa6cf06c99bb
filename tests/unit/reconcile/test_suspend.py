"""Suspend and resume, with the Kueue-style pod template merge (docs/behaviour.md#suspend)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.reconcile import JobPatch, Plan
from jobset_controller.reconcile.suspend import merge_maps, union_lists

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    status = plan.status or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def patches(plan: Plan) -> dict[str, JobPatch]:
    return {patch.name: patch for patch in plan.jobs_to_patch}


def workers(kit: Kit, **rjob: Any) -> JobSetBuilder:
    return kit.jobset().replicated_job("w", **{"replicas": 3, **rjob})


# --- suspend ------------------------------------------------------------------------------------


def test_suspending_patches_running_active_jobs_only(kit: Kit) -> None:
    builder = workers(kit).suspend()
    plan = kit.reconcile(
        builder,
        kit.job("w", 0, state="ready"),
        kit.job("w", 1, suspended=True),
        kit.job("w", 2, deleting=True),
        service=kit.service(),
    )
    assert list(patches(plan)) == ["trainer-w-0"]
    patch = patches(plan)["trainer-w-0"]
    assert patch.patch == {"spec": {"suspend": True}}
    assert (patch.uid, patch.resource_version, patch.reason) == (
        "uid-trainer-w-0-0",
        "100",
        "suspend",
    )
    assert not patch.clear_start_time


def test_suspending_sets_suspended_and_ends_a_restart(kit: Kit) -> None:
    builder = workers(kit).suspend()
    builder.condition("RestartingJobSet", "True", "DefaultFailurePolicy", "m")
    plan = kit.reconcile(builder, *kit.running(builder), service=kit.service())
    by_type = conditions(plan)
    suspended = by_type["Suspended"]
    assert (suspended["status"], suspended["reason"], suspended["message"]) == (
        "True",
        "SuspendedJobs",
        "jobset is suspended",
    )
    restarting = by_type["RestartingJobSet"]
    assert (restarting["status"], restarting["reason"], restarting["message"]) == (
        "False",
        "JobSetSuspended",
        "jobset is suspended",
    )
    assert [(e.type, e.reason) for e in plan.events] == [
        ("Normal", "SuspendedJobs"),
        ("Normal", "JobSetSuspended"),
    ]


def test_finished_jobs_are_not_suspended(kit: Kit) -> None:
    builder = workers(kit).suspend()
    plan = kit.reconcile(builder, kit.job("w", 0, state="succeeded"), service=kit.service())
    assert plan.jobs_to_patch == ()


# --- resume -------------------------------------------------------------------------------------


def test_resume_sets_suspend_false_and_clears_start_time_first(kit: Kit) -> None:
    builder = workers(kit, replicas=1)
    builder.condition("Suspended", "True", "SuspendedJobs", "jobset is suspended")
    job = kit.job("w", 0, suspended=True, state="pending", start_time=kit.earlier_text)
    plan = kit.reconcile(builder, job, service=kit.service())
    patch = patches(plan)["trainer-w-0"]
    assert patch.clear_start_time
    assert patch.patch["spec"]["suspend"] is False
    assert patch.reason == "resume"
    resumed = conditions(plan)["Suspended"]
    assert (resumed["status"], resumed["reason"], resumed["message"]) == (
        "False",
        "ResumeJobs",
        "jobset is resumed",
    )
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "ResumeJobs")]


def test_resume_without_start_time_does_not_clear_it(kit: Kit) -> None:
    builder = workers(kit, replicas=1)
    plan = kit.reconcile(builder, kit.job("w", 0, suspended=True), service=kit.service())
    assert not patches(plan)["trainer-w-0"].clear_start_time
    assert "Suspended" not in conditions(plan), "Suspended=False never appears on its own"


def test_resume_merges_the_current_pod_template_into_the_job(kit: Kit) -> None:
    builder = workers(
        kit,
        replicas=1,
        pod_labels={"queue": "new", "kueue": "admitted"},
        pod_annotations={"a": "1"},
        pod_spec={
            "nodeSelector": {"flavor": "a100", "zone": "b"},
            "tolerations": [
                {"key": "gpu", "operator": "Exists"},
                {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "schedulingGates": [{"name": "kueue"}, {"name": "topology"}],
        },
    )
    job_template = {
        "metadata": {"labels": {"queue": "old", "job-only": "x"}, "annotations": {"b": "2"}},
        "spec": {
            "nodeSelector": {"zone": "a", "host": "h1"},
            "tolerations": [
                {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "mine"},
            ],
            "schedulingGates": [{"name": "topology"}],
        },
    }
    job = kit.job("w", 0, suspended=True, pod_template=job_template)
    patch = patches(kit.reconcile(builder, job, service=kit.service()))["trainer-w-0"]
    assert patch.patch == {
        "spec": {
            "suspend": False,
            "template": {
                "metadata": {
                    "labels": {"queue": "new", "job-only": "x", "kueue": "admitted"},
                    "annotations": {"b": "2", "a": "1"},
                },
                "spec": {
                    "nodeSelector": {"zone": "b", "host": "h1", "flavor": "a100"},
                    "tolerations": [
                        {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "mine"},
                        {"key": "gpu", "operator": "Exists"},
                    ],
                    "schedulingGates": [{"name": "topology"}, {"name": "kueue"}],
                },
            },
        }
    }


def test_resume_patch_leaves_out_fields_that_do_not_change(kit: Kit) -> None:
    builder = workers(kit, replicas=1, pod_labels={"app": "x"})
    job = kit.job(
        "w", 0, suspended=True, pod_template={"metadata": {"labels": {"app": "x", "more": "y"}}}
    )
    patch = patches(kit.reconcile(builder, job, service=kit.service()))["trainer-w-0"]
    assert patch.patch == {"spec": {"suspend": False}}


@pytest.mark.parametrize(
    ("current", "desired", "expected"),
    [
        (None, None, []),
        ([1, 2], [2, 3], [1, 2, 3]),
        ([3, 1], [1, 2, 3], [3, 1, 2]),
    ],
    ids=["both empty", "union appends new entries", "job order is kept"],
)
def test_union_lists(
    current: list[int] | None, desired: list[int] | None, expected: list[int]
) -> None:
    assert union_lists(current, desired) == expected


def test_merge_maps_template_wins_and_nothing_is_removed() -> None:
    assert merge_maps({"a": "1", "b": "2"}, {"b": "3", "c": "4"}) == {"a": "1", "b": "3", "c": "4"}


def in_order_suspended_jobs(kit: Kit) -> tuple[JobSetBuilder, list[dict[str, Any]]]:
    builder = kit.jobset().replicated_job("driver").replicated_job("w", replicas=2).in_order()
    jobs = [
        kit.job("driver", 0, suspended=True, state="pending"),
        kit.job("w", 0, suspended=True, state="pending"),
        kit.job("w", 1, suspended=True, state="pending"),
    ]
    return builder, jobs


def test_in_order_resumes_one_replicated_job_at_a_time(kit: Kit) -> None:
    builder, jobs = in_order_suspended_jobs(kit)
    builder.condition("Suspended", "True", "SuspendedJobs", "jobset is suspended")
    first = kit.reconcile(builder, *jobs, service=kit.service())
    assert list(patches(first)) == ["trainer-driver-0"]
    assert conditions(first)["StartupPolicyInProgress"]["status"] == "True"
    assert conditions(first)["Suspended"]["status"] == "True", "not resumed until all started"
    jobs[0] = kit.job("driver", 0, state="ready")
    second = kit.reconcile(builder, *jobs, service=kit.service())
    assert sorted(patches(second)) == ["trainer-w-0", "trainer-w-1"]


def test_resume_waits_for_dependencies(kit: Kit) -> None:
    builder = (
        kit.jobset().replicated_job("init").replicated_job("w", depends_on=[("init", "Complete")])
    )
    jobs = [kit.job("init", 0, suspended=True), kit.job("w", 0, suspended=True)]
    plan = kit.reconcile(builder, *jobs, service=kit.service())
    assert list(patches(plan)) == ["trainer-init-0"]


def test_suspend_then_resume_round_trip_settles(kit: Kit) -> None:
    builder = workers(kit)
    snapshot, _ = kit.settle(kit.snapshot(builder))
    suspended_js = builder.copy().suspend()
    snapshot = kit.snapshot(
        suspended_js.status(**snapshot.jobset.to_dict()["status"]),
        *snapshot.jobs,
        service=snapshot.service,
    )
    snapshot, _ = kit.settle(snapshot)
    assert all(job["spec"]["suspend"] is True for job in snapshot.jobs)
    assert snapshot.jobset.status.conditions[0].type == "Suspended"
    running = builder.copy().status(**snapshot.jobset.to_dict()["status"])
    snapshot, _ = kit.settle(kit.snapshot(running, *snapshot.jobs, service=snapshot.service))
    assert all(job["spec"]["suspend"] is False for job in snapshot.jobs)
    (suspended,) = snapshot.jobset.status.conditions
    assert (suspended.status, suspended.reason) == ("False", "ResumeJobs")
