"""ttlSecondsAfterFinished and elastic parallelism/completions (docs/behaviour.md#ttl, #elastic)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.reconcile.ttl import TtlOutcome, finish_time, ttl_outcome

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

ELASTIC = FeatureGates(elastic_job_set=True)


def finished(kit: Kit, condition: str = "Completed") -> JobSetBuilder:
    builder = kit.jobset().replicated_job("w")
    reason = "AllJobsCompleted" if condition == "Completed" else "FailedJobs"
    builder.condition(condition, reason=reason, at=kit.earlier_text)
    entry = {"name": "w", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    return builder.status(terminalState=condition, restarts=0, replicatedJobsStatus=[entry])


# (id, ttl, condition, delete, requeue seconds)
TTL_CASES: list[tuple[str, int | None, str, bool, float | None]] = [
    ("no ttl never deletes", None, "Completed", False, None),
    ("ttl zero deletes at once", 0, "Completed", True, None),
    ("ttl not yet expired requeues for the rest", 900, "Completed", False, 300.0),
    ("ttl expired exactly deletes", 600, "Failed", True, None),
    ("ttl long expired deletes", 60, "Failed", True, None),
]


@pytest.mark.parametrize(
    ("ttl", "condition", "delete", "requeue"),
    [case[1:] for case in TTL_CASES],
    ids=[case[0] for case in TTL_CASES],
)
def test_ttl_after_finished(
    kit: Kit, ttl: int | None, condition: str, delete: bool, requeue: float | None
) -> None:
    builder = finished(kit, condition)
    if ttl is not None:
        builder.ttl(ttl)
    plan = kit.reconcile(builder, service=kit.service())
    assert plan.delete_jobset is delete
    assert plan.requeue_after == requeue
    assert plan.status is None


def test_finish_time_is_the_first_true_terminal_condition() -> None:
    conditions = (
        {"type": "Completed", "status": "False", "lastTransitionTime": "2025-01-01T00:00:00Z"},
        {"type": "Failed", "status": "True", "lastTransitionTime": "2025-01-02T00:00:00Z"},
    )
    moment = finish_time(conditions)
    assert moment is not None
    assert moment.isoformat() == "2025-01-02T00:00:00+00:00"


def test_unreadable_finish_time_neither_deletes_nor_requeues(kit: Kit) -> None:
    conditions = ({"type": "Completed", "status": "True", "lastTransitionTime": "yesterday"},)
    assert ttl_outcome(10, conditions, kit.now) == TtlOutcome()


def test_ttl_requeue_is_exact_to_the_second(kit: Kit) -> None:
    conditions = ({"type": "Completed", "status": "True", "lastTransitionTime": kit.earlier_text},)
    outcome = ttl_outcome(601, conditions, kit.now + timedelta(microseconds=500_000))
    assert outcome.requeue_after == 0.5


# --- elastic ------------------------------------------------------------------------------------


def elastic_jobset(kit: Kit, parallelism: int | None, completions: int | None) -> JobSetBuilder:
    return kit.jobset().replicated_job(
        "w", replicas=2, parallelism=parallelism, completions=completions
    )


# (id, gate, template parallelism, template completions, job sizes, patched)
ELASTIC_CASES: list[tuple[str, bool, int | None, int | None, tuple[int, int], bool]] = [
    ("grown template is propagated", True, 4, 4, (2, 2), True),
    ("shrunk template is propagated", True, 1, 1, (2, 2), True),
    ("equal sizes need no patch", True, 2, 2, (2, 2), False),
    ("gate off: nothing is propagated", False, 4, 4, (2, 2), False),
    ("unequal template values are not propagated", True, 4, 3, (2, 2), False),
    ("unset template values are not propagated", True, None, None, (1, 1), False),
]


@pytest.mark.parametrize(
    ("gate", "parallelism", "completions", "job_sizes", "patched"),
    [case[1:] for case in ELASTIC_CASES],
    ids=[case[0] for case in ELASTIC_CASES],
)
def test_elastic_propagation(
    kit: Kit,
    gate: bool,
    parallelism: int | None,
    completions: int | None,
    job_sizes: tuple[int, int],
    patched: bool,
) -> None:
    builder = elastic_jobset(kit, parallelism, completions)
    jobs = [
        kit.job("w", i, parallelism=job_sizes[0], completions=job_sizes[1], state="ready")
        for i in range(2)
    ]
    plan = kit.reconcile(
        builder, *jobs, service=kit.service(), features=FeatureGates(elastic_job_set=gate)
    )
    if not patched:
        assert plan.jobs_to_patch == ()
        return
    assert [p.name for p in plan.jobs_to_patch] == ["trainer-w-0", "trainer-w-1"]
    for patch in plan.jobs_to_patch:
        assert patch.patch == {"spec": {"parallelism": parallelism, "completions": completions}}
        assert patch.reason == "elastic"


def test_elastic_skips_finished_and_deleting_jobs(kit: Kit) -> None:
    builder = elastic_jobset(kit, 4, 4)
    jobs = [
        kit.job("w", 0, parallelism=2, completions=2, state="succeeded"),
        kit.job("w", 1, parallelism=2, completions=2, deleting=True),
    ]
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=ELASTIC)
    assert plan.jobs_to_patch == ()


def test_elastic_and_resume_of_one_job_are_one_patch(kit: Kit) -> None:
    builder = elastic_jobset(kit, 4, 4)
    jobs: list[dict[str, Any]] = [
        kit.job("w", i, parallelism=2, completions=2, suspended=True, start_time=kit.earlier_text)
        for i in range(2)
    ]
    plan = kit.reconcile(builder, *jobs, service=kit.service(), features=ELASTIC)
    (first, second) = plan.jobs_to_patch
    assert first.reason == "elastic+resume"
    assert first.clear_start_time
    assert first.patch["spec"]["parallelism"] == 4
    assert first.patch["spec"]["completions"] == 4
    assert first.patch["spec"]["suspend"] is False
    assert second.name == "trainer-w-1"
