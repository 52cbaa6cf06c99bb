"""Status writes whose only news is progress counters wait out one batch period together
(`controller.status_counts`); everything else is written by the pass that computed it."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.controller.conftest import StatusWriter, cache_children, offline_controller

from jobset_controller.controller.status_counts import ProgressCountBatch
from jobset_controller.reconcile import Plan
from jobset_controller.reconcile.plan import Event
from jobset_controller.runtime.clock import FakeClock


def status(active: int = 0, ready: int = 0, failed: int = 0, **extra: Any) -> dict[str, Any]:
    entry = {"name": "w", "active": active, "ready": ready, "succeeded": 0, "failed": failed}
    return {"restarts": 0, "replicatedJobsStatus": [entry], **extra}


def batch(period: float = 1.0) -> tuple[ProgressCountBatch, FakeClock]:
    clock = FakeClock(start=100.0)
    return ProgressCountBatch(clock, period), clock


def test_a_change_beyond_progress_counters_is_written_at_once() -> None:
    counts, _ = batch()
    completed = status(conditions=[{"type": "Completed", "status": "True"}])
    for new in (completed, status(failed=1), status(active=1) | {"restarts": 1}):
        plan = Plan(status=new)
        assert counts.hold("ns/js", status(), plan) == (plan, None)
    grown = status()
    grown["replicatedJobsStatus"].append({"name": "v", "active": 1})
    assert counts.hold("ns/js", status(), Plan(status=grown)) == (Plan(status=grown), None)


def test_a_counters_only_change_is_held_until_one_period_after_it_was_first_seen() -> None:
    counts, _ = batch()
    plan = Plan(status=status(active=1), status_resource_version="7")
    held, due = counts.hold("ns/js", status(), plan)
    assert held.status is None
    assert held.status_resource_version is None
    assert due == pytest.approx(1.0)


async def test_a_held_write_goes_out_with_the_pass_due_and_carries_every_change_since() -> None:
    counts, clock = batch()
    counts.hold("ns/js", status(), Plan(status=status(active=1)))
    await clock.advance(0.6)
    held, due = counts.hold("ns/js", status(), Plan(status=status(active=2)))
    assert held.status is None
    assert due == pytest.approx(0.4)
    await clock.advance(0.4)
    latest = Plan(status=status(active=2, ready=1))
    assert counts.hold("ns/js", status(), latest) == (latest, None)
    assert len(counts) == 0


def test_a_write_that_is_not_counters_only_ends_the_wait() -> None:
    counts, _ = batch()
    counts.hold("ns/js", status(), Plan(status=status(active=1)))
    failed = Plan(status=status(active=1, failed=1))
    assert counts.hold("ns/js", status(), failed) == (failed, None)
    assert len(counts) == 0


def test_a_plan_with_a_restart_an_outcome_or_an_event_after_the_write_is_never_held() -> None:
    counts, _ = batch()
    event = Event("Normal", "Reason", "message", after_status=True)
    plan = Plan(status=status(active=1), events=(event,))
    assert counts.hold("ns/js", status(), plan) == (plan, None)


def test_a_period_of_zero_writes_every_status_at_once() -> None:
    counts, _ = batch(period=0.0)
    plan = Plan(status=status(active=1))
    assert counts.hold("ns/js", status(), plan) == (plan, None)


def test_no_difference_or_a_deleted_jobset_drops_the_pending_time() -> None:
    counts, _ = batch()
    counts.hold("ns/a", status(), Plan(status=status(active=1)))
    counts.hold("ns/b", status(), Plan(status=status(active=1)))
    assert counts.hold("ns/a", status(active=1), Plan()) == (Plan(), None)
    counts.forget("ns/b")
    assert len(counts) == 0


def test_a_negative_period_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        ProgressCountBatch(FakeClock(), -1.0)


def jobset() -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "uid": "u"},
        "spec": {
            "replicatedJobs": [
                {"name": "w", "replicas": 2, "template": {"spec": {"template": {"spec": pod}}}}
            ]
        },
    }


async def test_the_controller_writes_a_pods_progress_one_period_later_by_a_requeue() -> None:
    clock = FakeClock(start=100.0)
    stored = jobset()
    executor = StatusWriter(stored)
    ctl = offline_controller(executor, progress_counts=ProgressCountBatch(clock, 1.0), clock=clock)
    ctl.jobsets.store.put(stored)
    await ctl.reconcile("ns/js")  # creates both Jobs and writes the first status at once
    first = executor.plans[-1]
    assert len(first.jobs_to_create) == 2
    assert first.status is not None
    ctl.jobsets.store.put(stored)  # the write reaches the cache, with the Service
    for job in cache_children(ctl, first):  # the Jobs start: one pod active each
        ctl.jobs.store.put({**job, "status": {"active": 1}})
    result = await ctl.reconcile("ns/js")
    assert len(executor.plans) == 1  # nothing else to do: the counters wait
    assert result is not None
    assert result.requeue_after == pytest.approx(1.0)
    await clock.advance(1.0)
    ctl.jobsets.store.put(stored)
    await ctl.reconcile("ns/js")  # the requeue
    written = executor.plans[-1].status
    assert written is not None
    assert written["replicatedJobsStatus"][0]["active"] == 2
