"""earlyJobConditions: a Job's FailureTarget / SuccessCriteriaMet count as Failed / Complete.

See docs/behaviour.md#early-job-conditions. The guarantee pinned here: with the option on, a pass
that sees a Job's interim condition decides exactly what it decides once the Job controller has
written the terminal condition with the same reason, message and time (it copies them), for every
failure policy action and the success policy; with the option off, interim conditions change
nothing (upstream's behaviour).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.reconcile import Plan

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

T1 = "2025-06-01T11:00:00Z"
T2 = "2025-06-01T11:30:00Z"
GATES = FeatureGates(restart_job=True)


def two_workers(kit: Kit) -> JobSetBuilder:
    return kit.jobset().replicated_job("leader").replicated_job("workers", replicas=2)


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    assert plan.status is not None
    return {c["type"]: c for c in plan.status.get("conditions", [])}


# Each failure policy action, and rules that filter on what the failure condition says.
POLICIES = {
    "no policy": None,
    "default action": {"maxRestarts": 3, "rules": []},
    "FailJobSet": {"maxRestarts": 3, "rules": [{"action": "FailJobSet", "name": "r"}]},
    "RestartJobSet": {"maxRestarts": 3, "rules": [{"action": "RestartJobSet", "name": "r"}]},
    "RestartJobSet at maxRestarts": {
        "maxRestarts": 0,
        "rules": [{"action": "RestartJobSet", "name": "r"}],
    },
    "RestartJobSetAndIgnoreMaxRestarts": {
        "maxRestarts": 0,
        "rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts", "name": "r"}],
    },
    "RestartJob": {"maxRestarts": 3, "rules": [{"action": "RestartJob", "name": "r"}]},
    "RestartJobAndIgnoreMaxRestarts": {
        "maxRestarts": 0,
        "rules": [{"action": "RestartJobAndIgnoreMaxRestarts", "name": "r"}],
    },
    "rule on the reason": {
        "maxRestarts": 3,
        "rules": [
            {"action": "FailJobSet", "name": "other", "onJobFailureReasons": ["DeadlineExceeded"]},
            {"action": "RestartJob", "name": "r", "onJobFailureReasons": ["PodFailurePolicy"]},
        ],
    },
    "rule on the message": {
        "maxRestarts": 3,
        "rules": [
            {
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "name": "r",
                "onJobFailureMessagePatterns": ["exit code 42"],
            }
        ],
    },
}


def with_policy(builder: JobSetBuilder, policy: Mapping[str, Any] | None) -> JobSetBuilder:
    if policy is not None:
        builder.failure_policy(*policy["rules"], max_restarts=policy["maxRestarts"])
    return builder


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_failure_target_decides_what_failed_decides_for_every_action(
    kit: Kit, policy: Mapping[str, Any] | None
) -> None:
    def plan(state: str, *, early: bool) -> Plan:
        message = "Container main for pod x failed with exit code 42 matching FailJob rule"
        return kit.reconcile(
            with_policy(two_workers(kit), policy),
            kit.job("leader", 0, state="ready"),
            kit.job("workers", 0, state="ready"),
            kit.job(
                "workers",
                1,
                state=state,
                finished_at=T1,
                reason="PodFailurePolicy",
                message=message,
            ),
            features=GATES,
            early_job_conditions=early,
        )

    early = plan("failure-target", early=True)
    assert early.status is not None, "the interim condition decided nothing"
    assert early == plan("failed", early=False)


def test_without_the_option_a_failure_target_is_an_active_job(kit: Kit) -> None:
    plan = kit.reconcile(
        two_workers(kit).failure_policy(max_restarts=3),
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="ready"),
        kit.job("workers", 1, state="failure-target"),
    )
    assert plan.status is not None  # the counts are written
    assert plan.status["restarts"] == 0
    assert "Failed" not in conditions(plan)
    assert "RestartingJobSet" not in conditions(plan)
    failed = {entry["name"]: entry["failed"] for entry in plan.status["replicatedJobsStatus"]}
    assert failed == {"leader": 0, "workers": 0}


def test_the_first_failed_job_is_the_earliest_failure_whichever_condition_says_it(
    kit: Kit,
) -> None:
    plan = kit.reconcile(
        two_workers(kit),
        kit.job("leader", 0, state="failed", finished_at=T2),
        kit.job("workers", 0, state="ready"),
        kit.job("workers", 1, state="failure-target", finished_at=T1),
        early_job_conditions=True,
    )
    assert conditions(plan)["Failed"]["message"].endswith("(first failed job: trainer-workers-1)")


def test_a_failure_target_is_counted_failed_in_the_status(kit: Kit) -> None:
    plan = kit.reconcile(
        two_workers(kit).failure_policy(max_restarts=3),
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="ready"),
        kit.job("workers", 1, state="failure-target"),
        early_job_conditions=True,
    )
    assert plan.status is not None
    failed = {entry["name"]: entry["failed"] for entry in plan.status["replicatedJobsStatus"]}
    assert failed == {"leader": 0, "workers": 1}


@pytest.mark.parametrize("operator", ["All", "Any"])
def test_success_criteria_met_decides_what_complete_decides(kit: Kit, operator: str) -> None:
    def plan(state: str, *, early: bool) -> Plan:
        return kit.reconcile(
            two_workers(kit).success_policy(operator, "workers"),
            kit.job("leader", 0, state="ready"),
            kit.job("workers", 0, state=state),
            kit.job("workers", 1, state=state),
            early_job_conditions=early,
        )

    early = plan("success-criteria-met", early=True)
    assert conditions(early)["Completed"]["status"] == "True"
    assert early.completed
    assert early == plan("succeeded", early=False)


def test_without_the_option_success_criteria_met_does_not_complete(kit: Kit) -> None:
    plan = kit.reconcile(
        two_workers(kit).success_policy("Any", "workers"),
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="success-criteria-met"),
        kit.job("workers", 1, state="ready"),
    )
    assert "Completed" not in conditions(plan)
    assert not plan.completed


def test_failure_wins_over_success_with_interim_conditions_too(kit: Kit) -> None:
    plan = kit.reconcile(
        two_workers(kit).success_policy("Any", "workers"),
        kit.job("leader", 0, state="failure-target"),
        kit.job("workers", 0, state="success-criteria-met"),
        kit.job("workers", 1, state="ready"),
        early_job_conditions=True,
    )
    assert conditions(plan)["Failed"]["status"] == "True"
    assert "Completed" not in conditions(plan)
