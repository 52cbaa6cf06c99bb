"""InOrder startup and dependsOn: which replicatedJobs are created when.

See docs/behaviour.md#job-creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.reconcile import Plan

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit


def created_names(plan: Plan) -> list[str]:
    return [job["metadata"]["name"] for job in plan.jobs_to_create]


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    status = plan.status or {}
    return {c["type"]: c for c in status.get("conditions", [])}


def in_order(kit: Kit) -> JobSetBuilder:
    return (
        kit.jobset()
        .replicated_job("driver")
        .replicated_job("workers", replicas=2)
        .replicated_job("ps")
        .in_order()
    )


# (id, states of existing jobs by name, expected created)
IN_ORDER_CASES: list[tuple[str, dict[str, str], list[str]]] = [
    ("first pass creates only the first replicatedJob", {}, ["trainer-driver-0"]),
    ("created but not ready waits", {"driver-0": "active"}, []),
    (
        "ready driver lets workers start",
        {"driver-0": "ready"},
        ["trainer-workers-0", "trainer-workers-1"],
    ),
    (
        "a succeeded or failed job counts as started",
        {"driver-0": "succeeded"},
        ["trainer-workers-0", "trainer-workers-1"],
    ),
    (
        "one of two workers ready still waits",
        {"driver-0": "ready", "workers-0": "ready", "workers-1": "active"},
        [],
    ),
    (
        "all workers ready lets ps start",
        {"driver-0": "ready", "workers-0": "ready", "workers-1": "ready"},
        ["trainer-ps-0"],
    ),
]


def existing_jobs(kit: Kit, states: dict[str, str]) -> list[dict[str, Any]]:
    jobs = []
    for key, state in states.items():
        rjob, index = key.rsplit("-", 1)
        jobs.append(kit.job(rjob, int(index), state=state))
    return jobs


@pytest.mark.parametrize(
    ("states", "expected"),
    [case[1:] for case in IN_ORDER_CASES],
    ids=[case[0] for case in IN_ORDER_CASES],
)
def test_in_order_creates_one_replicated_job_at_a_time(
    kit: Kit, states: dict[str, str], expected: list[str]
) -> None:
    jobs = existing_jobs(kit, states)
    plan = kit.reconcile(in_order(kit), *jobs, service=kit.service())
    assert created_names(plan) == expected


def test_in_order_in_progress_then_completed(kit: Kit) -> None:
    first = kit.reconcile(in_order(kit), service=kit.service())
    progress = conditions(first)["StartupPolicyInProgress"]
    assert (progress["status"], progress["reason"], progress["message"]) == (
        "True",
        "InOrderStartupPolicyInProgress",
        "in order startup policy is in progress",
    )
    assert [(e.type, e.reason) for e in first.events] == [
        ("Normal", "InOrderStartupPolicyInProgress")
    ]
    builder = in_order(kit).condition(
        "StartupPolicyInProgress",
        "True",
        "InOrderStartupPolicyInProgress",
        "in order startup policy is in progress",
    )
    done = kit.reconcile(builder, *kit.running(builder, state="ready"), service=kit.service())
    by_type = conditions(done)
    assert (
        by_type["StartupPolicyCompleted"]["status"],
        by_type["StartupPolicyCompleted"]["reason"],
    ) == (
        "True",
        "InOrderStartupPolicyCompleted",
    )
    assert by_type["StartupPolicyInProgress"]["status"] == "False"
    assert by_type["StartupPolicyCompleted"]["message"] == "in order startup policy has completed"


def test_in_order_does_not_gate_a_suspended_jobset(kit: Kit) -> None:
    plan = kit.reconcile(in_order(kit).suspend(), service=kit.service())
    assert created_names(plan) == [
        "trainer-driver-0",
        "trainer-workers-0",
        "trainer-workers-1",
        "trainer-ps-0",
    ]
    assert all(job["spec"]["suspend"] is True for job in plan.jobs_to_create)
    assert "StartupPolicyInProgress" not in conditions(plan)


def test_any_order_creates_everything_and_sets_no_startup_condition(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("driver").replicated_job("workers", replicas=2)
    plan = kit.reconcile(builder, service=kit.service())
    assert len(plan.jobs_to_create) == 3
    assert not {"StartupPolicyInProgress", "StartupPolicyCompleted"} & set(conditions(plan))


def depends(kit: Kit, status: str) -> JobSetBuilder:
    return (
        kit.jobset()
        .replicated_job("init")
        .replicated_job("workers", replicas=2, depends_on=[("init", status)])
        .replicated_job("sidecar")
    )


# (id, dependsOn status, init state, suspended, workers created)
DEPENDS_CASES: list[tuple[str, str, str | None, bool, bool]] = [
    ("Ready: not created before the dependency exists", "Ready", None, False, False),
    ("Ready: waits while the dependency is not ready", "Ready", "active", False, False),
    ("Ready: created once the dependency is ready", "Ready", "ready", False, True),
    ("Complete: a ready dependency is not enough", "Complete", "ready", False, False),
    ("Complete: created once the dependency succeeded", "Complete", "succeeded", False, True),
    ("Ready: honoured while suspended", "Ready", "pending", True, False),
]


@pytest.mark.parametrize(
    ("status", "init_state", "suspended", "workers_created"),
    [case[1:] for case in DEPENDS_CASES],
    ids=[case[0] for case in DEPENDS_CASES],
)
def test_depends_on(
    kit: Kit, status: str, init_state: str | None, suspended: bool, workers_created: bool
) -> None:
    builder = depends(kit, status).suspend(suspended)
    builder.success_policy("All", "sidecar")
    jobs = [] if init_state is None else [kit.job("init", 0, state=init_state, suspended=suspended)]
    plan = kit.reconcile(builder, *jobs, service=kit.service())
    names = created_names(plan)
    assert ("trainer-workers-0" in names) is workers_created
    # A later replicatedJob without dependencies is not held back.
    assert "trainer-sidecar-0" in names


def test_multiple_dependencies_must_all_be_reached(kit: Kit) -> None:
    builder = (
        kit.jobset()
        .replicated_job("a")
        .replicated_job("b")
        .replicated_job("c", depends_on=[("a", "Ready"), ("b", "Complete")])
        .success_policy("All", "c")
    )
    only_a = kit.reconcile(
        builder, kit.job("a", 0, state="ready"), kit.job("b", 0), service=kit.service()
    )
    assert created_names(only_a) == []
    both = kit.reconcile(
        builder,
        kit.job("a", 0, state="ready"),
        kit.job("b", 0, state="succeeded"),
        service=kit.service(),
    )
    assert created_names(both) == ["trainer-c-0"]
