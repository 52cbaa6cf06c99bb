"""What broke a run: the first failure in restart and failure messages, and the restart record.

See docs/behaviour.md#restart-timeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.reconcile import Plan, Restart
from jobset_controller.reconcile.first_failure import (
    MAX_DETAIL,
    FirstFailure,
    first_failure,
    with_detail,
)

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

T1 = "2025-06-01T11:00:00Z"
T2 = "2025-06-01T11:30:00Z"


def two_workers(kit: Kit) -> JobSetBuilder:
    return kit.jobset().replicated_job("leader").replicated_job("workers", replicas=2)


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    assert plan.status is not None
    return {c["type"]: c for c in plan.status.get("conditions", [])}


# --- the words ------------------------------------------------------------------------------------


def test_a_container_exit_is_described_with_its_job_reason_pod_and_node() -> None:
    failure = FirstFailure(
        "BackoffLimitExceeded", "js-w-1-0-x", "n-12", "trainer", 137, "OOMKilled"
    )
    assert failure.describe() == (
        "BackoffLimitExceeded, pod js-w-1-0-x on node n-12, container trainer exited with code "
        "137 (OOMKilled)"
    )


def test_a_pod_without_a_failing_container_is_described_by_its_own_reason() -> None:
    failure = FirstFailure(
        "BackoffLimitExceeded",
        "js-w-1-0-x",
        "n-12",
        pod_reason="Evicted",
        pod_message="The node was low on resource: memory.",
    )
    assert failure.describe() == (
        "BackoffLimitExceeded, pod js-w-1-0-x on node n-12, Evicted: The node was low on "
        "resource: memory."
    )


def test_without_a_failed_pod_the_message_is_upstreams_word_for_word() -> None:
    message = "applying RestartJobSet failure policy action (first failed job: js-w-1)"
    assert with_detail(message, FirstFailure("BackoffLimitExceeded")) == message
    assert with_detail(message, None) == message


def test_the_description_is_bounded() -> None:
    failure = FirstFailure("PodFailurePolicy", "p", pod_reason="R", pod_message="x" * 5000)
    text = failure.describe()
    assert len(text) == MAX_DETAIL
    assert text.endswith("...")


def test_the_first_failure_is_the_jobs_own_pod_failed_first_not_one_it_terminated(
    kit: Kit,
) -> None:
    job = kit.job("workers", 1, state="failed")
    other_job = kit.job("workers", 0, state="ready")
    pods = [
        kit.failed_pod(job, "killed", exit_code=137, finished_at=T1, deleting=True),
        kit.failed_pod(job, "late", exit_code=2, finished_at=T2),
        kit.failed_pod(job, "first", exit_code=3, finished_at=T1, node="n-7"),
        kit.failed_pod(other_job, "elsewhere", exit_code=9, finished_at="2025-01-01T00:00:00Z"),
    ]
    failure = first_failure(job["metadata"]["uid"], "BackoffLimitExceeded", pods)
    assert (failure.pod, failure.node, failure.exit_code) == (
        "trainer-workers-1-0-first",
        "n-7",
        3,
    )


def test_a_pod_with_a_failing_container_comes_before_one_without(kit: Kit) -> None:
    job = kit.job("workers", 1, state="failed")
    pods = [
        kit.failed_pod(job, "evicted", exit_code=None, pod_reason="Evicted"),
        kit.failed_pod(job, "crashed", exit_code=1, finished_at=T2),
    ]
    assert first_failure(job["metadata"]["uid"], "", pods).pod == "trainer-workers-1-0-crashed"


# --- in the messages ------------------------------------------------------------------------------


def test_a_restart_message_and_its_event_name_the_pod_node_and_exit_code(kit: Kit) -> None:
    failed = kit.job("workers", 1, state="failed", finished_at=T1)
    plan = kit.reconcile(
        two_workers(kit).failure_policy(max_restarts=3),
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="ready"),
        failed,
        failed_pods=[kit.failed_pod(failed, node="n-3", exit_code=137, reason="OOMKilled")],
    )
    message = conditions(plan)["RestartingJobSet"]["message"]
    assert message == (
        "applying RestartJobSet failure policy action (first failed job: trainer-workers-1): "
        "BackoffLimitExceeded, pod trainer-workers-1-0-abcde on node n-3, container main "
        "exited with code 137 (OOMKilled)"
    )
    notes = {event.reason: event.note for event in plan.events}
    assert notes["RestartJobSetFailurePolicyAction"] == message


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (None, "FailedJobs"),
        ({"rules": [{"action": "FailJobSet", "name": "r"}]}, "FailJobSetFailurePolicyAction"),
        ({"maxRestarts": 0, "rules": []}, "ReachedMaxRestarts"),
    ],
)
def test_a_failure_message_names_the_pod_node_and_exit_code(
    kit: Kit, policy: Mapping[str, Any] | None, reason: str
) -> None:
    builder = two_workers(kit)
    if policy is not None:
        builder.failure_policy(*policy["rules"], max_restarts=policy.get("maxRestarts", 3))
    failed = kit.job("workers", 1, state="failed", finished_at=T1)
    plan = kit.reconcile(
        builder,
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="ready"),
        failed,
        failed_pods=[kit.failed_pod(failed, node="n-3", exit_code=3)],
    )
    condition = conditions(plan)["Failed"]
    assert condition["reason"] == reason
    assert condition["message"].endswith(
        "(first failed job: trainer-workers-1): BackoffLimitExceeded, pod "
        "trainer-workers-1-0-abcde on node n-3, container main exited with code 3 (Error)"
    )
    assert plan.restart is None


# --- the restart record ---------------------------------------------------------------------------


def test_a_whole_jobset_restart_is_recorded_with_its_action_reason_and_failure_time(
    kit: Kit,
) -> None:
    plan = kit.reconcile(
        two_workers(kit)
        .failure_policy({"action": "RestartJobSetAndIgnoreMaxRestarts", "name": "r"})
        .status(restarts=2),
        kit.job("leader", 0, state="ready", restart_attempt=2),
        kit.job("workers", 0, state="ready", restart_attempt=2),
        kit.job(
            "workers",
            1,
            state="failed",
            restart_attempt=2,
            finished_at=T1,
            reason="PodFailurePolicy",
        ),
    )
    assert plan.restart == Restart(
        action="RestartJobSetAndIgnoreMaxRestarts",
        reason="PodFailurePolicy",
        job="trainer-workers-1",
        failed_at=T1,
        whole_jobset=True,
        attempt=3,
    )


def test_a_per_job_restart_is_recorded_as_not_whole(kit: Kit) -> None:
    plan = kit.reconcile(
        two_workers(kit).failure_policy({"action": "RestartJob", "name": "r"}, max_restarts=3),
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="ready"),
        kit.job("workers", 1, state="failed", finished_at=T1),
        features=FeatureGates(restart_job=True),
    )
    assert plan.restart is not None
    assert (plan.restart.action, plan.restart.whole_jobset, plan.restart.attempt) == (
        "RestartJob",
        False,
        0,
    )


def test_a_plan_cannot_record_a_restart_without_its_status_write() -> None:
    with pytest.raises(ValueError, match="restart needs the status write"):
        Plan(restart=Restart("RestartJobSet", "", "j", "", True, 1))
