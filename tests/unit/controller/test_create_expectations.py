"""Create expectations: a JobSet's next pass waits until the Jobs its last pass created are seen,
and never longer than the timeout (controller/create_expectations.py, one test per guarantee)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.unit.controller.conftest import offline_controller

from jobset_controller.controller.create_expectations import EXPECTATION_TIMEOUT, CreateExpectations
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.reconcile import Plan
from jobset_controller.runtime.clock import FakeClock


class Cache:
    def __init__(self) -> None:
        self.names: set[tuple[str, str]] = set()

    def holds(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.names


def expectations(clock: FakeClock) -> tuple[CreateExpectations, Cache, list[str]]:
    cache, enqueued = Cache(), list[str]()
    return CreateExpectations(cache.holds, enqueued.append, clock=clock), cache, enqueued


async def test_a_key_waits_until_every_created_job_has_an_event() -> None:
    waits, _, _ = expectations(FakeClock())
    waits.expect("ns/js", "u", ["js-w-0", "js-w-1"])
    assert waits.pending("ns/js", "u")
    waits.observed("ns/js", "js-w-0")
    assert waits.pending("ns/js", "u")
    waits.observed("ns/js", "js-w-1")
    assert not waits.pending("ns/js", "u")
    assert len(waits) == 0  # satisfied records are dropped


async def test_a_job_the_cache_holds_counts_as_seen() -> None:
    waits, cache, _ = expectations(FakeClock())
    waits.expect("ns/js", "u", ["js-w-0"])
    cache.names.add(("ns", "js-w-0"))  # AlreadyExists, or the cache got it first
    assert not waits.pending("ns/js", "u")


async def test_the_cache_is_scanned_only_at_calls_without_new_events() -> None:
    lookups: list[str] = []

    def holds(namespace: str, name: str) -> bool:
        lookups.append(name)
        return False

    enqueued: list[str] = []
    waits = CreateExpectations(holds, enqueued.append, clock=FakeClock())
    waits.expect("ns/js", "u", [f"js-w-{i}" for i in range(1000)])
    assert waits.pending("ns/js", "u")
    assert len(lookups) == 1000  # the first call scans
    for i in range(10):
        waits.observed("ns/js", f"js-w-{i}")
        assert waits.pending("ns/js", "u")
    assert len(lookups) == 1000  # events arrived before each call: no scan
    assert waits.pending("ns/js", "u")
    assert len(lookups) == 1990  # no event since the last call: the safety net scans again


async def test_other_jobsets_events_do_not_count() -> None:
    waits, cache, _ = expectations(FakeClock())
    waits.expect("ns/js", "u", ["js-w-0"])
    waits.observed("ns/other", "js-w-0")
    cache.names.add(("elsewhere", "js-w-0"))
    assert waits.pending("ns/js", "u")
    assert not waits.pending("ns/other", "u")


async def test_a_job_never_seen_releases_the_key_once_at_the_timeout() -> None:
    clock = FakeClock()
    waits, _, enqueued = expectations(clock)
    waits.expect("ns/js", "u", ["js-w-0"])
    await clock.advance(EXPECTATION_TIMEOUT - 1)
    assert waits.pending("ns/js", "u")
    assert enqueued == []
    await clock.advance(1)
    assert enqueued == ["ns/js"]
    assert not waits.pending("ns/js", "u")
    await clock.advance(10 * EXPECTATION_TIMEOUT)
    assert enqueued == ["ns/js"]


async def test_a_satisfied_key_adds_nothing_at_the_deadline() -> None:
    clock = FakeClock()
    waits, _, enqueued = expectations(clock)
    waits.expect("ns/js", "u", ["js-w-0"])
    waits.observed("ns/js", "js-w-0")
    assert not waits.pending("ns/js", "u")
    await clock.settle()
    assert clock.pending_sleepers == 0  # the timer does not sleep for a satisfied record
    await clock.advance(2 * EXPECTATION_TIMEOUT)
    assert enqueued == []


async def test_close_stops_the_timer_and_nothing_is_enqueued_after() -> None:
    clock = FakeClock()
    waits, _, enqueued = expectations(clock)
    waits.expect("ns/js", "u", ["js-w-0"])
    await clock.settle()
    assert clock.pending_sleepers == 1  # the timer waits for the deadline
    await waits.close()
    assert clock.pending_sleepers == 0
    assert len(waits) == 0
    await clock.advance(2 * EXPECTATION_TIMEOUT)
    assert enqueued == []


async def test_forget_drops_the_record() -> None:
    clock = FakeClock()
    waits, _, enqueued = expectations(clock)
    waits.expect("ns/js", "u", ["js-w-0"])
    waits.forget("ns/js")
    assert not waits.pending("ns/js", "u")
    await clock.advance(2 * EXPECTATION_TIMEOUT)
    assert enqueued == []


async def test_expecting_nothing_records_nothing() -> None:
    clock = FakeClock()
    waits, _, _ = expectations(clock)
    waits.expect("ns/js", "u", [])
    assert len(waits) == 0
    await clock.settle()
    assert clock.pending_sleepers == 0


# The controller around it.


class CountingExecutor:
    """Creates every planned Job (reports it created) unless `fail`; `exists` names answer
    AlreadyExists (not reported)."""

    def __init__(self, fail: bool = False, exists: frozenset[str] = frozenset()) -> None:
        self.plans: list[Plan] = []
        self.fail = fail
        self.exists = exists

    async def execute(
        self, jobset: Any, plan: Plan, *, on_created: Callable[[str], None]
    ) -> str | None:
        self.plans.append(plan)
        if self.fail:
            raise RuntimeError("the API server refused a create")
        for job in plan.jobs_to_create:
            if job["metadata"]["name"] not in self.exists:
                on_created(job["metadata"]["name"])
        return None


def jobset(replicas: int) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    template = {"spec": {"template": {"spec": pod}}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "uid": "u", "resourceVersion": "5"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": replicas, "template": template}]},
    }


def controller(executor: CountingExecutor) -> JobSetController:
    return offline_controller(executor, clock=FakeClock())


async def test_the_pass_after_creates_waits_for_the_last_created_job() -> None:
    executor = CountingExecutor()
    ctl = controller(executor)
    ctl.jobsets.store.put(jobset(replicas=3))
    await ctl.reconcile("ns/js")
    created = [dict(job) for job in executor.plans[0].jobs_to_create]
    assert len(created) == 3
    for job in created[:2]:  # two of the three ADDED events have arrived
        ctl.jobs.store.put(job)
    await ctl.reconcile("ns/js")
    assert len(executor.plans) == 1
    assert ctl.expectation_skips == 1
    ctl.jobs.store.put(created[2])
    await ctl.reconcile("ns/js")
    assert len(executor.plans) == 2
    assert executor.plans[1].jobs_to_create == ()  # a full cache: nothing created twice


async def test_a_pass_whose_creates_failed_does_not_wait_for_them() -> None:
    executor = CountingExecutor(fail=True)
    ctl = controller(executor)
    ctl.jobsets.store.put(jobset(replicas=2))
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await ctl.reconcile("ns/js")
    assert len(executor.plans) == 2  # the retry ran: it waited for nothing
    assert ctl.expectation_skips == 0


async def test_a_deleted_jobset_leaves_no_record() -> None:
    executor = CountingExecutor()
    ctl = controller(executor)
    ctl.jobsets.store.put(jobset(replicas=1))
    await ctl.reconcile("ns/js")
    assert len(ctl.expectations) == 1
    ctl.jobsets.store.remove("ns/js")
    await ctl.reconcile("ns/js")
    assert len(ctl.expectations) == 0


async def test_one_timer_serves_every_key_in_deadline_order() -> None:
    clock = FakeClock()
    waits, _, enqueued = expectations(clock)
    waits.expect("ns/a", "u", ["a-w-0"])
    await clock.advance(10)
    waits.expect("ns/b", "u", ["b-w-0"])
    waits.expect("ns/c", "u", ["c-w-0"])
    waits.observed("ns/c", "c-w-0")
    await clock.settle()
    assert clock.pending_sleepers == 1
    await clock.advance(EXPECTATION_TIMEOUT - 10)
    assert enqueued == ["ns/a"]
    await clock.advance(10)
    assert enqueued == ["ns/a", "ns/b"]  # c was satisfied: nothing at its deadline
    assert clock.pending_sleepers == 0


async def test_a_jobset_of_the_same_name_with_another_uid_does_not_wait() -> None:
    waits, _, _ = expectations(FakeClock())
    waits.expect("ns/js", "old-uid", ["js-w-0"])
    assert not waits.pending("ns/js", "new-uid")  # deleted and created again meanwhile
    assert len(waits) == 0


async def test_a_job_that_already_existed_is_not_waited_for() -> None:
    # js-w-1 exists without our label, so the Job cache never holds it: waiting for it would
    # hold the JobSet until the deadline after every pass.
    executor = CountingExecutor(exists=frozenset({"js-w-1"}))
    ctl = controller(executor)
    ctl.jobsets.store.put(jobset(replicas=2))
    await ctl.reconcile("ns/js")
    ctl.jobs.store.put(dict(executor.plans[0].jobs_to_create[0]))  # js-w-0 arrives
    await ctl.reconcile("ns/js")
    assert len(executor.plans) == 2
    assert ctl.expectation_skips == 0
