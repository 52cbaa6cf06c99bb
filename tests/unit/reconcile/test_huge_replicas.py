"""A pass costs what the existing objects cost, not what ``replicas`` says (RestartJob gate on).

``replicas: 20000000`` is valid (replicas x parallelism fits in int32). Per-index restart counters
are held sparsely, so classifying children, reading a Job's restart attempt and counting a restart
never build anything one entry per replica. Memory is measured with tracemalloc: a per-replica
list or tuple of 20 million entries would take well over 100 MB; no wall clock is involved.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from jobset_controller.api import JOB_RESTART_ATTEMPT_KEY, FeatureGates
from jobset_controller.reconcile.catalogue import RESTART_JOB_TOO_MANY_REPLICAS_EVENT
from jobset_controller.reconcile.classify import Children, classify_jobs
from jobset_controller.reconcile.draft import IndexCounts
from jobset_controller.reconcile.job_creation import MAX_JOB_CREATES_PER_PASS

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

HUGE = 20_000_000
GATE = FeatureGates(restart_job=True)
# Far below one per-replica sequence (20M pointers = 160 MB) and above what one pass's bounded
# manifests need (1000 of them).
MEMORY_BUDGET = 32 * 1024 * 1024

T = TypeVar("T")


def peak_memory(call: Callable[[], T]) -> tuple[T, int]:
    tracemalloc.start()
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def huge(kit: Kit, *rules: dict[str, Any]) -> JobSetBuilder:
    builder = kit.jobset().replicated_job("leader").replicated_job("workers", replicas=HUGE)
    if rules:
        builder.failure_policy(*rules, max_restarts=5)
    return builder


def few_workers(kit: Kit, **job_fields: Any) -> Iterator[dict[str, Any]]:
    for index in (0, 1, 7):
        yield kit.job("workers", index, job_restart_attempt=0, **job_fields)


def test_reconcile_with_huge_replicas_costs_the_jobs_present(kit: Kit) -> None:
    # No jobRestarts arrays: the API caps them at 1024 entries, so with 20M replicas they can only
    # be absent, which means zero for every index.
    jobs = [kit.job("leader", 0, job_restart_attempt=0), *few_workers(kit)]

    plan, peak = peak_memory(lambda: kit.reconcile(huge(kit), *jobs, features=GATE))

    assert peak < MEMORY_BUDGET, f"peak {peak} bytes"
    # Creation is bounded per pass; the first missing indexes come first, at restart attempt 0.
    assert len(plan.jobs_to_create) == MAX_JOB_CREATES_PER_PASS
    created = plan.jobs_to_create[:3]
    assert [job["metadata"]["name"] for job in created] == [
        "trainer-workers-2",
        "trainer-workers-3",
        "trainer-workers-4",
    ]
    assert {job["metadata"]["labels"][JOB_RESTART_ATTEMPT_KEY] for job in created} == {"0"}
    assert plan.jobs_to_delete == ()
    assert plan.status is not None
    (workers,) = [e for e in plan.status["replicatedJobsStatus"] if e["name"] == "workers"]
    assert "jobRestarts" not in workers
    assert "jobRestartsCountTowardsMax" not in workers


def test_classifying_children_of_a_huge_replicated_job_builds_no_per_replica_list(
    kit: Kit,
) -> None:
    jobs = [kit.job("workers", index, job_restart_attempt=0) for index in (0, 5, HUGE - 1)]

    children, peak = peak_memory(
        lambda: classify_jobs(
            jobs, restarts=0, replicas={"workers": HUGE}, job_restarts={"workers": []}
        )
    )

    assert peak < 1024 * 1024, f"peak {peak} bytes"
    assert isinstance(children, Children)
    assert len(children.active) == 3


def test_a_failed_job_of_a_huge_replicated_job_fails_the_jobset_cheaply(kit: Kit) -> None:
    # The default policy path (no failure policy) with the gate on.
    jobs = list(few_workers(kit, state="failed"))
    plan, peak = peak_memory(lambda: kit.reconcile(huge(kit), *jobs, features=GATE))
    assert peak < MEMORY_BUDGET, f"peak {peak} bytes"
    assert plan.status is not None
    assert plan.status["terminalState"] == "Failed"


def test_restart_job_on_a_huge_replicated_job_is_refused_without_building_arrays(
    kit: Kit,
) -> None:
    # Admission refuses a RestartJob rule next to > 1024 replicas; a rule added by an update is
    # not checked again, so the pass must refuse too instead of building a 20M-entry array.
    builder = huge(kit, {"name": "one", "action": "RestartJob"})
    jobs = [kit.job("leader", 0), *few_workers(kit, state="failed")]

    plan, peak = peak_memory(lambda: kit.reconcile(builder, *jobs, features=GATE))

    assert peak < MEMORY_BUDGET, f"peak {peak} bytes"
    assert plan.status is None
    assert [(e.type, e.reason, e.after_status) for e in plan.events] == [
        ("Warning", RESTART_JOB_TOO_MANY_REPLICAS_EVENT, False)
    ]
    assert "20000000 replicas" in plan.events[0].note


def test_restart_job_records_only_the_restarted_index_and_renders_the_full_array(
    kit: Kit,
) -> None:
    builder = (
        kit.jobset()
        .replicated_job("leader")
        .replicated_job("workers", replicas=4)
        .failure_policy({"name": "one", "action": "RestartJob"}, max_restarts=5)
    )
    failed = kit.job("workers", 2, state="failed", job_restart_attempt=0)
    plan = kit.reconcile(builder, failed, features=GATE)
    assert plan.status is not None
    (workers,) = [e for e in plan.status["replicatedJobsStatus"] if e["name"] == "workers"]
    assert workers["jobRestarts"] == [0, 0, 1, 0]
    assert workers["jobRestartsCountTowardsMax"] == [0, 0, 1, 0]


def test_index_counts_hold_only_non_zero_counters() -> None:
    counts = IndexCounts.from_status([0, 3, 0, 0])
    assert dict(counts.nonzero) == {1: 3}
    assert (counts.length, counts.at(1), counts.at(2), counts.at(HUGE), counts.total()) == (
        4,
        3,
        0,
        0,
        3,
    )
    assert counts.as_list() == [0, 3, 0, 0]


def test_index_counts_increment_stretches_the_array_only_to_the_replicas() -> None:
    stretched = IndexCounts().incremented(2, replicas=5)
    assert dict(stretched.nonzero) == {2: 1}
    assert stretched.as_list() == [0, 0, 1, 0, 0]
    longer = IndexCounts.from_status([1, 0, 0, 0, 0, 0]).incremented(0, replicas=3)
    assert longer.as_list() == [2, 0, 0, 0, 0, 0]
    huge_counts = IndexCounts().incremented(HUGE - 1, replicas=HUGE)
    assert dict(huge_counts.nonzero) == {HUGE - 1: 1}
    assert huge_counts.total() == 1
