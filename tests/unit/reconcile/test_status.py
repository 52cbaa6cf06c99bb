"""replicatedJobsStatus counts, status rendering and the write/no-write decision.

See docs/behaviour.md#status.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import REPLICATED_JOB_NAME_KEY, FeatureGates
from jobset_controller.reconcile.classify import Children
from jobset_controller.reconcile.counts import (
    ReplicatedJobCounts,
    count_replicated_jobs,
    job_is_ready,
)
from jobset_controller.reconcile.status import same_status

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import Kit


# (id, parallelism, completions, ready, succeeded, expected)
READY_CASES = [
    ("all pods ready", 4, 4, 4, 0, True),
    ("one pod short", 4, 4, 3, 0, False),
    ("ready plus succeeded pods count together", 4, 4, 2, 2, True),
    ("completions below parallelism lowers the bar", 4, 2, 2, 0, True),
    ("completions unset: parallelism decides", 3, None, 2, 0, False),
]


@pytest.mark.parametrize(
    ("parallelism", "completions", "ready", "succeeded", "expected"),
    [case[1:] for case in READY_CASES],
    ids=[case[0] for case in READY_CASES],
)
def test_job_is_ready(
    kit: Kit,
    parallelism: int,
    completions: int | None,
    ready: int,
    succeeded: int,
    expected: bool,
) -> None:
    job = kit.job("w", 0, parallelism=parallelism, completions=completions)
    job["status"].update(ready=ready, succeeded=succeeded)
    assert job_is_ready(job) is expected


def test_job_without_parallelism_reads_as_one(kit: Kit) -> None:
    job = kit.job("w", 0, completions=None)
    del job["spec"]["parallelism"]
    job["status"]["ready"] = 1
    assert job_is_ready(job)


def test_counts_per_replicated_job(kit: Kit) -> None:
    unknown = kit.job("ghost", 0)
    unlabelled = kit.job("w", 3, labels={REPLICATED_JOB_NAME_KEY: None})
    children = Children(
        previous=(kit.job("w", 0, state="ready", restart_attempt=0),),
        active=(
            kit.job("w", 0, state="ready"),
            kit.job("w", 1, state="active", suspended=True),
            kit.job("w", 2, state="pending"),
            unknown,
            unlabelled,
        ),
        succeeded=(kit.job("p", 0, state="succeeded"),),
        failed=(kit.job("w", 4, state="failed"), kit.job("p", 1, state="failed")),
    )
    assert count_replicated_jobs(["w", "p", "empty"], children) == (
        ReplicatedJobCounts("w", ready=1, succeeded=0, failed=1, active=2, suspended=1),
        ReplicatedJobCounts("p", ready=0, succeeded=1, failed=1, active=0, suspended=0),
        ReplicatedJobCounts("empty"),
    )


def entry(name: str, **counts: int) -> dict[str, Any]:
    base = {"name": name, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    return {**base, **counts}


SAME_CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    (
        "entry order does not matter",
        {"restarts": 0, "replicatedJobsStatus": [entry("a"), entry("b")]},
        {"restarts": 0, "replicatedJobsStatus": [entry("b"), entry("a")]},
        True,
    ),
    ("absent restarts equals zero", {}, {"restarts": 0}, True),
    (
        "zero restartsCountTowardsMax equals absent",
        {"restarts": 0, "restartsCountTowardsMax": 0, "terminalState": ""},
        {"restarts": 0},
        True,
    ),
    (
        "empty jobRestarts equals absent",
        {"replicatedJobsStatus": [{**entry("a"), "jobRestarts": []}]},
        {"restarts": 0, "replicatedJobsStatus": [entry("a")]},
        True,
    ),
    (
        "a count differs",
        {"replicatedJobsStatus": [entry("a")]},
        {"replicatedJobsStatus": [entry("a", ready=1)]},
        False,
    ),
    ("restarts differ", {"restarts": 1}, {"restarts": 2}, False),
    (
        "a condition differs",
        {"conditions": [{"type": "Suspended", "status": "True"}]},
        {"conditions": [{"type": "Suspended", "status": "False"}]},
        False,
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [case[1:] for case in SAME_CASES],
    ids=[case[0] for case in SAME_CASES],
)
def test_same_status(old: dict[str, Any], new: dict[str, Any], expected: bool) -> None:
    assert same_status(old, new) is expected


def test_first_pass_writes_counts_for_every_replicated_job_name_descending(kit: Kit) -> None:
    """Upstream's stored order, not the spec's: Trainer's MPI JobSet is [launcher, node] in the
    spec and [node, launcher] in upstream's status, so replicatedJobsStatus[0] is `node`."""
    builder = kit.jobset().replicated_job("launcher").replicated_job("node", replicas=2)
    plan = kit.reconcile(builder, kit.job("node", 1, state="ready"))
    assert plan.status == {
        "restarts": 0,
        "replicatedJobsStatus": [entry("node", ready=1, active=1), entry("launcher")],
    }


def test_a_write_puts_a_stored_status_in_another_order_in_upstreams_order(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("a").replicated_job("b")
    builder.status(restarts=0, replicatedJobsStatus=[entry("a"), entry("b")])
    plan = kit.reconcile(builder, kit.job("a", 0, state="ready"), service=kit.service())
    assert plan.status is not None
    assert [e["name"] for e in plan.status["replicatedJobsStatus"]] == ["b", "a"]


def test_unknown_status_fields_and_entry_fields_survive(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w")
    builder.status(
        restarts=0,
        futureField={"x": 1},
        currentInPlaceRestartAttempt=2,
        replicatedJobsStatus=[{**entry("w"), "futureCount": 7}],
    )
    plan = kit.reconcile(builder, kit.job("w", 0, state="ready"))
    assert plan.status is not None
    assert plan.status["futureField"] == {"x": 1}
    assert plan.status["currentInPlaceRestartAttempt"] == 2
    assert plan.status["replicatedJobsStatus"] == [
        {**entry("w", ready=1, active=1), "futureCount": 7}
    ]


def test_restarts_is_always_written_and_zero_fields_are_omitted(kit: Kit) -> None:
    plan = kit.reconcile(kit.jobset().replicated_job("w"))
    assert plan.status is not None
    assert plan.status["restarts"] == 0
    for omitted in ("restartsCountTowardsMax", "terminalState", "conditions"):
        assert omitted not in plan.status


@pytest.mark.parametrize("gate", [True, False], ids=["gate on keeps", "gate off drops"])
def test_job_restart_arrays_are_carried_only_with_the_gate(kit: Kit, gate: bool) -> None:
    builder = kit.jobset().replicated_job("w", replicas=2)
    builder.status(
        restarts=0,
        replicatedJobsStatus=[
            {**entry("w"), "jobRestarts": [1, 0], "jobRestartsCountTowardsMax": [1, 0]}
        ],
    )
    plan = kit.reconcile(builder, features=FeatureGates(restart_job=gate))
    if gate:
        assert plan.status is None, "kept as they are: nothing to write"
        return
    assert plan.status is not None
    (written,) = plan.status["replicatedJobsStatus"]
    assert "jobRestarts" not in written
    assert "jobRestartsCountTowardsMax" not in written


def test_status_in_another_order_is_not_rewritten(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("a").replicated_job("b")
    builder.status(restarts=0, replicatedJobsStatus=[entry("b"), entry("a")])
    plan = kit.reconcile(builder, service=kit.service())
    assert plan.status is None
