"""The controller reads the JobSet once per pass and does not act on a cached JobSet older than
its own last status write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.unit.controller.conftest import offline_controller

from jobset_controller.controller.jobset import JobSetController
from jobset_controller.reconcile import Plan


class CountingExecutor:
    def __init__(self, written: str | None) -> None:
        self.plans: list[Plan] = []
        self.written = written

    async def execute(
        self, jobset: Any, plan: Plan, *, on_created: Callable[[str], None] = lambda name: None
    ) -> str | None:
        self.plans.append(plan)
        return self.written


def jobset(resource_version: str) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "js",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": resource_version,
        },
        "spec": {
            "replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": pod}}}}]
        },
    }


def controller(executor: CountingExecutor) -> JobSetController:
    return offline_controller(executor)


async def test_a_cache_older_than_our_write_is_not_reconciled() -> None:
    executor = CountingExecutor(written="10")
    ctl = controller(executor)
    ctl.jobsets.store.put(jobset("5"))
    await ctl.reconcile("ns/js")  # plans Jobs + status; our write produced RV 10
    assert len(executor.plans) == 1
    for job in executor.plans[0].jobs_to_create:  # the Jobs it created reach the cache
        ctl.jobs.store.put(dict(job))
    await ctl.reconcile("ns/js")  # the cache still shows RV 5: skip, the watch will bring 10
    assert len(executor.plans) == 1
    assert ctl.stale_skips == 1
    ctl.jobsets.store.put(jobset("10"))
    await ctl.reconcile("ns/js")  # caught up: reconcile again
    assert len(executor.plans) == 2


async def test_a_pass_reads_the_jobset_from_the_cache_once() -> None:
    executor = CountingExecutor(written=None)
    ctl = controller(executor)
    ctl.jobsets.store.put(jobset("5"))
    store_get = ctl.jobsets.store.get
    keys: list[str] = []

    def counting_get(key: str) -> Any:
        keys.append(key)
        return store_get(key)

    ctl.jobsets.store.get = counting_get  # type: ignore[method-assign]
    await ctl.reconcile("ns/js")
    assert keys == ["ns/js"]
    assert len(executor.plans) == 1
    assert executor.plans[0].status_resource_version == "5"
