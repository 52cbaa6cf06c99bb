"""In-place restart, the controller's part (gate InPlaceRestart): one test per guarantee of
docs/behaviour.md#in-place-restart, on the pure pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import IN_PLACE_RESTART_ATTEMPT_KEY, JOBSET_NAME_KEY, FeatureGates
from jobset_controller.reconcile import Plan, Snapshot, reconcile
from jobset_controller.reconcile.catalogue import (
    IN_PLACE_RESTART_MISCONFIGURED_EVENT,
    INVALID_IN_PLACE_RESTART_ATTEMPT_EVENT,
    REACHED_MAX_RESTARTS_MESSAGE,
    REACHED_MAX_RESTARTS_REASON,
    VALIDATION_FAILED_REASON,
)
from jobset_controller.reconcile.in_place_restart import parse_attempt

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

GATE_ON = FeatureGates(in_place_restart=True)
MAX_INT32 = 2**31 - 1


def in_place(kit: Kit, *, replicas: int = 2, parallelism: int = 2, max_restarts: int = 3) -> Any:
    """A JobSet admission accepts for in-place restart: 2 Jobs x 2 pods by default."""
    builder = kit.jobset().replicated_job(
        "workers", replicas=replicas, parallelism=parallelism, completions=parallelism
    )
    builder = builder.failure_policy(max_restarts=max_restarts, restart_strategy="InPlaceRestart")
    wire = builder.wire()
    for rjob in wire["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["backoffLimit"] = MAX_INT32
        rjob["template"]["spec"]["podReplacementPolicy"] = "Failed"
    out = builder.copy()
    out._wire = wire
    return out


def pod(
    name: str,
    attempt: str | int | None,
    *,
    phase: str = "Running",
    restarts: int = 0,
    init_restarts: int = 0,
) -> dict[str, Any]:
    annotations = {} if attempt is None else {IN_PLACE_RESTART_ATTEMPT_KEY: str(attempt)}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {JOBSET_NAME_KEY: "trainer"},
            "annotations": annotations,
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"restartCount": restarts}],
            "initContainerStatuses": [{"restartCount": init_restarts}],
        },
    }


def pods(*attempts: str | int | None) -> tuple[dict[str, Any], ...]:
    return tuple(pod(f"trainer-workers-{i}", a) for i, a in enumerate(attempts))


def run(
    kit: Kit,
    builder: JobSetBuilder,
    pod_list: tuple[Mapping[str, Any], ...],
    *,
    features: FeatureGates = GATE_ON,
) -> Plan:
    jobs = kit.running(builder, state="ready", parallelism=2, completions=2)
    snapshot = kit.snapshot(builder, *jobs, service=kit.service(), features=features)
    return reconcile(dataclasses.replace(snapshot, pods=pod_list))


def status(plan: Plan) -> Mapping[str, Any]:
    assert plan.status is not None
    return plan.status


def in_place_writes(plan: Plan, builder: JobSetBuilder) -> dict[str, Any]:
    """The in-place status fields ``plan`` changes from what ``builder`` stores."""
    if plan.status is None:
        return {}
    stored = builder.wire().get("status") or {}
    keys = ("previousInPlaceRestartAttempt", "currentInPlaceRestartAttempt")
    return {k: plan.status[k] for k in keys if plan.status.get(k) != stored.get(k)}


def failed(plan: Plan) -> tuple[str, str]:
    for condition in status(plan).get("conditions", []):
        if condition["type"] == "Failed":
            return condition["reason"], condition["message"]
    raise AssertionError("not failed")


def test_the_gate_on_runs_an_in_place_jobset_instead_of_refusing_it(kit: Kit) -> None:
    plan = kit.reconcile(in_place(kit), features=GATE_ON)
    assert not plan.failed
    assert len(plan.jobs_to_create) == 2


def test_the_gate_on_keeps_upstreams_validation_messages_for_in_place_jobsets(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("workers", replicas=1, parallelism=2, completions=3)
    builder = builder.failure_policy(max_restarts=1, restart_strategy="InPlaceRestart")
    plan = kit.reconcile(builder, features=GATE_ON)
    reason, message = failed(plan)
    assert reason == VALIDATION_FAILED_REASON
    assert "must be set to 2147483647 (MaxInt32) when in-place restart is enabled" in message
    assert "must be set to Failed when in-place restart is enabled" in message
    assert "completions and parallelism must be set and equal to each other" in message


def test_all_pods_at_one_attempt_lift_the_barrier(kit: Kit) -> None:
    builder = in_place(kit)
    plan = run(kit, builder, pods(0, 0, 0, 0))
    assert in_place_writes(plan, builder) == {"currentInPlaceRestartAttempt": 0}


def test_the_current_attempt_is_written_once(kit: Kit) -> None:
    builder = in_place(kit).status(currentInPlaceRestartAttempt=2, restarts=0)
    plan = run(kit, builder, pods(2, 2, 2, 2))
    assert in_place_writes(plan, builder) == {}


def test_missing_annotations_hold_the_barrier(kit: Kit) -> None:
    builder = in_place(kit)
    plan = run(kit, builder, pods(0, 0, 0, None))
    assert in_place_writes(plan, builder) == {}
    assert plan.requeue_after is None


def test_a_pod_past_the_others_makes_the_others_restart(kit: Kit) -> None:
    builder = in_place(kit).status(currentInPlaceRestartAttempt=0)
    plan = run(kit, builder, pods(1, 0, 0, 0))
    assert in_place_writes(plan, builder) == {"previousInPlaceRestartAttempt": 0}


def test_the_previous_attempt_is_never_lowered(kit: Kit) -> None:
    builder = in_place(kit, max_restarts=10)
    builder = builder.status(previousInPlaceRestartAttempt=2, currentInPlaceRestartAttempt=2)
    plan = run(kit, builder, pods(2, 2, 2, None))
    assert in_place_writes(plan, builder) == {}  # 2 - 1 is below the stored 2
    plan = run(kit, builder, pods(3, 2, 2, 2))
    assert in_place_writes(plan, builder) == {}  # 3 - 1 is the stored 2: unchanged
    plan = run(kit, builder, pods(4, 3, 3, 3))
    assert in_place_writes(plan, builder) == {"previousInPlaceRestartAttempt": 3}


def test_a_first_attempt_mismatch_changes_nothing(kit: Kit) -> None:
    builder = in_place(kit)
    plan = run(kit, builder, pods(0, 0, None, None))
    assert in_place_writes(plan, builder) == {}


def test_failed_pods_are_left_out_like_recreate(kit: Kit) -> None:
    failed_pod = pod("trainer-workers-old", 0, phase="Failed")
    plan = run(kit, in_place(kit), (*pods(1, 1, 1, 1), failed_pod))
    assert status(plan)["currentInPlaceRestartAttempt"] == 1


def test_a_container_restarted_more_than_max_restarts_fails_the_jobset(kit: Kit) -> None:
    slow = pod("trainer-workers-0", 0, restarts=4)
    plan = run(kit, in_place(kit, max_restarts=3), (slow, *pods(0, 0, 0)[1:]))
    assert failed(plan) == (REACHED_MAX_RESTARTS_REASON, REACHED_MAX_RESTARTS_MESSAGE)
    assert plan.failed
    assert status(plan)["terminalState"] == "Failed"


def test_an_init_container_restart_counts_too(kit: Kit) -> None:
    slow = pod("trainer-workers-0", None, init_restarts=4)
    plan = run(kit, in_place(kit, max_restarts=3), (slow,))
    assert failed(plan) == (REACHED_MAX_RESTARTS_REASON, REACHED_MAX_RESTARTS_MESSAGE)


def test_restarts_up_to_max_restarts_are_allowed(kit: Kit) -> None:
    slow = pod("trainer-workers-0", 3, restarts=3)
    plan = run(kit, in_place(kit, max_restarts=3), (slow, *pods(3, 3, 3, 3)[1:]))
    assert not plan.failed
    assert status(plan)["currentInPlaceRestartAttempt"] == 3


def test_an_attempt_past_max_restarts_fails_the_jobset(kit: Kit) -> None:
    plan = run(kit, in_place(kit, max_restarts=3), pods(4, 3, 3, 3))
    assert failed(plan) == (REACHED_MAX_RESTARTS_REASON, REACHED_MAX_RESTARTS_MESSAGE)


def test_restarts_that_do_not_count_towards_max_are_subtracted(kit: Kit) -> None:
    builder = in_place(kit, max_restarts=3).status(restarts=2, restartsCountTowardsMax=0)
    plan = run(kit, builder, pods(5, 5, 5, 5))
    assert not plan.failed
    assert status(plan)["currentInPlaceRestartAttempt"] == 5


@pytest.mark.parametrize("value", ["x", "-1", "1.5", " 1", "1_0", "", str(MAX_INT32 + 1)])
def test_a_bad_attempt_annotation_is_a_warning_event_not_a_retry(kit: Kit, value: str) -> None:
    builder = in_place(kit)
    plan = run(kit, builder, pods(0, value, 0, 0))
    warnings = [e for e in plan.events if e.reason == INVALID_IN_PLACE_RESTART_ATTEMPT_EVENT]
    assert len(warnings) == 1
    assert not warnings[0].after_status
    assert "trainer-workers-1" in warnings[0].note
    assert "must be non-negative integer" in warnings[0].note
    assert plan.requeue_after is None
    assert in_place_writes(plan, builder) == {}


def test_attempt_syntax_follows_atoi() -> None:
    assert [parse_attempt(v) for v in ("0", "+7", "007", "-0")] == [0, 7, 7, 0]


def test_completions_unequal_to_parallelism_is_a_warning_event(kit: Kit) -> None:
    builder = in_place(kit)
    wire = builder.wire()
    wire["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = 3
    builder._wire = wire
    plan = run(kit, builder, pods(0, 0, 0, 0))  # realised: admission's checks are not redone
    events = [e for e in plan.events if e.reason == IN_PLACE_RESTART_MISCONFIGURED_EVENT]
    assert [e.note for e in events] == [
        "workers: in-place restart requires jobTemplate.spec.completions == "
        "jobTemplate.spec.parallelism != nil"
    ]
    assert plan.requeue_after is None
    assert not plan.failed


def test_the_gate_off_refuses_the_strategy_and_ignores_pods(kit: Kit) -> None:
    builder = in_place(kit).status(restarts=0)
    plan = run(kit, builder, pods(4, 4, 4, 4), features=FeatureGates())
    assert in_place_writes(plan, builder) == {}
    assert failed(plan)[0] == "InPlaceRestartNotSupported"


def test_other_strategies_ignore_pods(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("workers", replicas=2, parallelism=2, completions=2)
    builder = builder.failure_policy(max_restarts=0)
    plan = run(kit, builder, pods(9, 9, 9, 9))
    assert not plan.failed
    assert in_place_writes(plan, builder) == {}


def test_failed_jobs_are_recreated_as_with_recreate(kit: Kit) -> None:
    builder = in_place(kit, max_restarts=3)
    jobs = (
        kit.job("workers", 0, state="failed", parallelism=2, completions=2),
        kit.job("workers", 1, state="ready", parallelism=2, completions=2),
    )
    snapshot = kit.snapshot(builder, *jobs, service=kit.service(), features=GATE_ON)
    plan = reconcile(dataclasses.replace(snapshot, pods=pods(0, 0, 0, 0)))
    assert status(plan)["restarts"] == 1
    assert status(plan)["restartsCountTowardsMax"] == 1
    after = kit.apply_plan(snapshot, plan)
    assert after is not None
    second = reconcile(after)
    assert {d.name for d in second.jobs_to_delete} == {"trainer-workers-0", "trainer-workers-1"}


def test_a_steady_in_place_jobset_writes_nothing(kit: Kit) -> None:
    builder = in_place(kit)
    jobs = kit.running(builder, state="ready", parallelism=2, completions=2)
    snapshot: Snapshot = kit.snapshot(builder, *jobs, service=kit.service(), features=GATE_ON)
    snapshot = dataclasses.replace(snapshot, pods=pods(0, 0, 0, 0))
    final, plan = kit.settle(snapshot)
    assert final.jobset.status.current_in_place_restart_attempt == 0
    assert kit.has_no_writes(plan)
