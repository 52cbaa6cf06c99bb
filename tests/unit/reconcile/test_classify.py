"""Sorting child Jobs into previous / active / succeeded / failed.

See docs/behaviour.md#classification.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import (
    JOB_INDEX_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
    FeatureGates,
)
from jobset_controller.reconcile.catalogue import INVALID_CHILD_JOB_EVENT
from jobset_controller.reconcile.classify import Children, InvalidChild, classify_jobs

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import Kit


def bucket_of(children: Children, name: str) -> str:
    for bucket in ("previous", "active", "succeeded", "failed"):
        jobs: Sequence[Mapping[str, Any]] = getattr(children, bucket)
        if any(job["metadata"]["name"] == name for job in jobs):
            return bucket
    raise AssertionError(f"{name} in no bucket")


# (id, job kwargs, status.restarts, gate on, jobRestarts of w, expected bucket)
CASES: list[tuple[str, dict[str, Any], int, bool, list[int], str]] = [
    ("running job of the current attempt is active", {}, 0, False, [], "active"),
    ("pending job is active", {"state": "pending"}, 0, False, [], "active"),
    ("complete job is succeeded", {"state": "succeeded"}, 0, False, [], "succeeded"),
    ("failed job is failed", {"state": "failed"}, 0, False, [], "failed"),
    ("lower restart attempt is previous", {"restart_attempt": 0}, 1, False, [], "previous"),
    (
        "failed job of an earlier attempt is previous, not failed",
        {"state": "failed", "restart_attempt": 1},
        2,
        False,
        [],
        "previous",
    ),
    ("higher restart attempt counts as current", {"restart_attempt": 3}, 1, False, [], "active"),
    (
        "gate: job restart attempt below the index target is previous",
        {"job_restart_attempt": 0},
        0,
        True,
        [0, 1],
        "previous",
    ),
    (
        "gate: job restart attempt at the target is current",
        {"job_restart_attempt": 1, "state": "failed"},
        0,
        True,
        [0, 1],
        "failed",
    ),
    (
        "gate: missing job restart attempt label counts as current",
        {},
        0,
        True,
        [5, 5],
        "active",
    ),
    (
        "gate off: job restart attempt label is ignored",
        {"job_restart_attempt": 0},
        0,
        False,
        [0, 1],
        "active",
    ),
]


@pytest.mark.parametrize(
    ("job_fields", "restarts", "gate", "job_restarts", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_job_bucket(
    kit: Kit,
    job_fields: dict[str, Any],
    restarts: int,
    gate: bool,
    job_restarts: list[int],
    expected: str,
) -> None:
    job = kit.job("w", 1, **job_fields)
    children = classify_jobs(
        [job],
        restarts=restarts,
        replicas={"w": 2},
        job_restarts={"w": job_restarts} if gate else None,
    )
    assert isinstance(children, Children)
    assert bucket_of(children, "trainer-w-1") == expected


def test_complete_wins_over_failed_when_both_are_true(kit: Kit) -> None:
    job = kit.job("w", 0, state="succeeded")
    job["status"]["conditions"].append(
        {"type": "Failed", "status": "True", "lastTransitionTime": kit.earlier_text}
    )
    children = classify_jobs([job], restarts=0, replicas={"w": 1}, job_restarts=None)
    assert isinstance(children, Children)
    assert bucket_of(children, "trainer-w-0") == "succeeded"


@pytest.mark.parametrize(
    "condition_type", ["Suspended", "FailureTarget", "SuccessCriteriaMet", "Complete"]
)
def test_non_finishing_or_false_conditions_leave_a_job_active(
    kit: Kit, condition_type: str
) -> None:
    job = kit.job("w", 0)
    status = "False" if condition_type == "Complete" else "True"
    job["status"]["conditions"] = [{"type": condition_type, "status": status}]
    children = classify_jobs([job], restarts=0, replicas={"w": 1}, job_restarts=None)
    assert isinstance(children, Children)
    assert bucket_of(children, "trainer-w-0") == "active"


# (id, label overrides, gate, expected problem fragment)
INVALID: list[tuple[str, dict[str, str | None], bool, str]] = [
    ("missing restart attempt", {RESTARTS_KEY: None}, False, "restart-attempt is missing"),
    ("non-integer restart attempt", {RESTARTS_KEY: "one"}, False, "is not an integer"),
    ("restart attempt with spaces", {RESTARTS_KEY: " 1"}, False, "is not an integer"),
    (
        "gate: missing replicatedjob name",
        {REPLICATED_JOB_NAME_KEY: None},
        True,
        "replicatedjob-name is missing",
    ),
    ("gate: missing job index", {JOB_INDEX_KEY: None}, True, "job-index is missing"),
    ("gate: bad job index", {JOB_INDEX_KEY: "x"}, True, "job-index='x' is not an integer"),
    (
        "gate: bad job restart attempt",
        {JOB_RESTART_ATTEMPT_KEY: "1.5"},
        True,
        "job-restart-attempt='1.5'",
    ),
    (
        "gate: job index out of range",
        {JOB_INDEX_KEY: "7", JOB_RESTART_ATTEMPT_KEY: "0"},
        True,
        "out of range",
    ),
]


@pytest.mark.parametrize(
    ("labels", "gate", "problem"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_unreadable_labels_make_an_invalid_child(
    kit: Kit, labels: dict[str, str | None], gate: bool, problem: str
) -> None:
    job = kit.job("w", 0, labels=labels)
    result = classify_jobs(
        [kit.job("w", 1), job],
        restarts=0,
        replicas={"w": 2},
        job_restarts={} if gate else None,
    )
    assert isinstance(result, InvalidChild)
    assert result.job_name == "trainer-w-0"
    assert problem in result.problem


def test_invalid_child_stops_the_pass_with_a_warning_event_and_no_writes(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w", replicas=2)
    bad = kit.job("w", 0, labels={RESTARTS_KEY: "x"})
    plan = kit.reconcile(builder, bad, kit.job("w", 1, state="failed"))
    assert len(plan.events) == 1
    event = plan.events[0]
    assert (event.type, event.reason, event.after_status) == (
        "Warning",
        INVALID_CHILD_JOB_EVENT,
        False,
    )
    assert "trainer-w-0" in event.note
    assert "restart-attempt" in event.note
    assert plan.status is None
    assert plan.jobs_to_create == ()
    assert plan.jobs_to_delete == ()
    assert plan.jobs_to_patch == ()


def test_job_without_uid_is_an_invalid_child(kit: Kit) -> None:
    job = kit.job("w", 0)
    del job["metadata"]["uid"]
    result = classify_jobs([job], restarts=0, replicas={"w": 1}, job_restarts=None)
    assert isinstance(result, InvalidChild)


def test_job_index_label_is_required_only_with_the_restart_job_gate(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w")
    job = kit.job("w", 0, labels={JOB_INDEX_KEY: None})
    without_gate = kit.reconcile(builder, job)
    assert all(event.reason != INVALID_CHILD_JOB_EVENT for event in without_gate.events)
    with_gate = kit.reconcile(builder, job, features=FeatureGates(restart_job=True))
    assert [event.reason for event in with_gate.events] == [INVALID_CHILD_JOB_EVENT]


def test_buckets_keep_the_snapshot_order(kit: Kit) -> None:
    jobs = [kit.job("w", i) for i in (2, 0, 1)]
    children = classify_jobs(jobs, restarts=0, replicas={"w": 3}, job_restarts=None)
    assert isinstance(children, Children)
    assert [job["metadata"]["name"] for job in children.active] == [
        "trainer-w-2",
        "trainer-w-0",
        "trainer-w-1",
    ]
