"""The success policy: operators, targets, and what completing does.

See docs/behaviour.md#success-policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import SuccessPolicy
from jobset_controller.reconcile.success_policy import (
    num_jobs_expected_to_succeed,
    success_policy_is_met,
)

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit


def driver_and_workers(kit: Kit) -> JobSetBuilder:
    return kit.jobset().replicated_job("driver").replicated_job("workers", replicas=2)


# (id, operator, targets, succeeded (rjob, index), completes)
CASES: list[tuple[str, str | None, list[str], list[tuple[str, int]], bool]] = [
    ("All: every job succeeded", "All", [], [("driver", 0), ("workers", 0), ("workers", 1)], True),
    ("All: one job still running", "All", [], [("driver", 0), ("workers", 0)], False),
    ("All with target: all workers", "All", ["workers"], [("workers", 0), ("workers", 1)], True),
    ("All with target: driver does not count", "All", ["workers"], [("driver", 0)], False),
    ("Any: one job of any replicatedJob", "Any", [], [("workers", 1)], True),
    ("Any with target: the targeted one", "Any", ["driver"], [("driver", 0)], True),
    ("Any with target: an untargeted job", "Any", ["driver"], [("workers", 0)], False),
    (
        "no success policy reads as All",
        None,
        [],
        [("driver", 0), ("workers", 0), ("workers", 1)],
        True,
    ),
]


@pytest.mark.parametrize(
    ("operator", "targets", "succeeded", "completes"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_success_policy(
    kit: Kit,
    operator: str | None,
    targets: list[str],
    succeeded: list[tuple[str, int]],
    completes: bool,
) -> None:
    builder = driver_and_workers(kit)
    if operator is not None:
        builder.success_policy(operator, *targets)
    jobs = {(rjob, index): kit.job(rjob, index) for rjob, index in [("driver", 0)]}
    jobs.update({(r, i): kit.job(r, i) for r, i in [("workers", 0), ("workers", 1)]})
    for key in succeeded:
        jobs[key] = kit.job(*key, state="succeeded")
    plan = kit.reconcile(builder, *jobs.values(), service=kit.service())
    written = plan.status or {}
    completed = any(
        c["type"] == "Completed" and c["status"] == "True" for c in written.get("conditions", [])
    )
    assert completed is completes
    assert plan.completed is completes


def test_completing_writes_condition_terminal_state_and_event(kit: Kit) -> None:
    builder = driver_and_workers(kit).success_policy("Any")
    builder.condition("RestartingJobSet", "False", "JobsReady", "all jobs are ready")
    plan = kit.reconcile(
        builder,
        kit.job("driver", 0, state="succeeded"),
        kit.job("workers", 0),
        service=kit.service(),
    )
    assert plan.status is not None
    assert plan.status["terminalState"] == "Completed"
    by_type = {c["type"]: c for c in plan.status["conditions"]}
    completed = by_type["Completed"]
    assert (completed["reason"], completed["message"], completed["lastTransitionTime"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
        kit.now_text,
    )
    restarting = by_type["RestartingJobSet"]
    assert (restarting["reason"], restarting["message"]) == (
        "JobSetCompleted",
        "jobset completed successfully",
    )
    assert [(e.type, e.reason, e.after_status) for e in plan.events] == [
        ("Normal", "AllJobsCompleted", True),
        ("Normal", "JobSetCompleted", True),
    ]
    assert plan.jobs_to_delete == (), "the next pass cleans up"
    assert plan.jobs_to_create == ()


def test_zero_replicas_never_complete(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w", replicas=0)
    settled, plan = kit.settle(kit.snapshot(builder, service=kit.service()))
    assert plan.is_empty()
    assert settled.jobset.status.conditions == []


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"operator": "Any"}, 1),
        ({"operator": "All"}, 3),
        ({"operator": "All", "targetReplicatedJobs": ["workers"]}, 2),
    ],
    ids=["Any needs one", "All needs every replica", "All with targets needs theirs"],
)
def test_num_jobs_expected_to_succeed(kit: Kit, policy: dict[str, Any], expected: int) -> None:
    rjobs = driver_and_workers(kit).build().spec.replicated_jobs
    assert num_jobs_expected_to_succeed(SuccessPolicy.model_validate(policy), rjobs) == expected


def test_success_policy_is_met_accepts_none_as_all(kit: Kit) -> None:
    rjobs = driver_and_workers(kit).build().spec.replicated_jobs
    assert not success_policy_is_met(None, rjobs, [kit.job("driver", 0, state="succeeded")])
