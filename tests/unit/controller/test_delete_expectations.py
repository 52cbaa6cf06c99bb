"""Delete expectations: a Job, Workload or PodGroup a pass deleted reads as Terminating until the
cache says so itself, and never longer than EXPIRY (controller/delete_expectations.py, one test
per guarantee)."""

from __future__ import annotations

from typing import Any

from tests.unit.controller.conftest import (
    PlanRecorder,
    StatusWriter,
    cache_children,
    offline_controller,
)

from jobset_controller.api import FeatureGates
from jobset_controller.controller.delete_expectations import EXPIRY, DeleteExpectations
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.runtime.clock import FakeClock

AT = "2026-11-26T07:00:00Z"


def pod_group(uid: str, deleting: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"pg-{uid}", "uid": uid}
    if deleting is not None:
        metadata["deletionTimestamp"] = deleting
    return {"metadata": metadata, "spec": {}}


def test_a_deleted_object_the_cache_still_shows_live_reads_as_terminating() -> None:
    deletions = DeleteExpectations(FakeClock())
    cached = pod_group("a")
    deletions.deleted(["a"], AT)
    seen = deletions.view(cached)
    assert seen["metadata"]["deletionTimestamp"] == AT
    assert "deletionTimestamp" not in cached["metadata"], "the cache's object is not changed"


def test_once_the_cache_shows_the_deletion_its_own_object_is_used_and_the_record_dropped() -> None:
    deletions = DeleteExpectations(FakeClock())
    deletions.deleted(["a"], AT)
    cached = pod_group("a", deleting="2026-11-26T07:00:01Z")
    assert deletions.view(cached) is cached
    assert len(deletions) == 0


async def test_a_record_expires_so_a_failed_delete_does_not_hold_for_ever() -> None:
    clock = FakeClock()
    deletions = DeleteExpectations(clock)
    deletions.deleted(["a"], AT)
    await clock.advance(EXPIRY + 1)
    cached = pod_group("a")
    assert deletions.view(cached) is cached
    assert len(deletions) == 0
    deletions.deleted(["b"], AT)
    await clock.advance(EXPIRY + 1)
    deletions.deleted(["c"], AT)
    assert len(deletions) == 1, "old records go when new ones come"


def test_objects_never_deleted_by_us_pass_through_untouched() -> None:
    deletions = DeleteExpectations(FakeClock())
    deletions.deleted(["a", ""], AT)
    other = pod_group("b")
    assert deletions.view(other) is other
    assert len(deletions) == 1, "an empty UID is not recorded"


def gang_jobset(*, suspend: bool, resource_version: str) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "gang",
            "namespace": "ns",
            "uid": "uid-gang",
            "resourceVersion": resource_version,
        },
        "spec": {
            "suspend": suspend,
            "scheduling": {},
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": {"spec": pod}}},
                }
            ],
        },
    }


async def test_a_resume_before_the_cache_shows_the_suspend_passes_delete_is_held() -> None:
    """The suspend pass deletes the PodGroup; the resume pass runs before the watch delivered
    that: it must see the PodGroup Terminating (and hold), not live (and link new pods to it)."""
    executor = PlanRecorder()
    ctl = JobSetController(
        object(),  # type: ignore[arg-type]  # informers are not started here
        enqueue=lambda key: None,
        executor=executor,  # type: ignore[arg-type]
        recorder=object(),  # type: ignore[arg-type]
        features=FeatureGates(workload_aware_scheduling=True),
        scheduling_api=True,
        clock=FakeClock(),
    )
    assert ctl.scheduling is not None
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "gang"}
    group = {
        "metadata": {
            "name": "gang-ba683bc367",  # the KEP name of its JobSet-wide group
            "namespace": "ns",
            "uid": "uid-group",
            "ownerReferences": [{**owner, "uid": "uid-gang", "controller": True}],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
    }
    ctl.scheduling[1].store.put(group)
    ctl.jobsets.store.put(gang_jobset(suspend=True, resource_version="5"))
    await ctl.reconcile("ns/gang")
    assert [write.uid for write in executor.plans[-1].scheduling_to_delete] == ["uid-group"]

    ctl.jobsets.store.put(gang_jobset(suspend=False, resource_version="6"))  # cache: still live
    await ctl.reconcile("ns/gang")
    held = executor.plans[-1]
    assert held.jobs_to_create == ()
    assert held.pod_groups_to_create == ()
    assert held.requeue_after is not None


async def test_a_job_a_restart_deleted_is_not_deleted_again_while_the_cache_shows_it_live() -> None:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    stored: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "uid": "u"},
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [
                {"name": "w", "replicas": 2, "template": {"spec": {"template": {"spec": pod}}}}
            ],
        },
    }
    executor = StatusWriter(stored)
    ctl = offline_controller(executor, clock=FakeClock())
    ctl.jobsets.store.put(stored)
    await ctl.reconcile("ns/js")  # the first attempt's Jobs and Service
    first = executor.plans[-1]
    ctl.jobsets.store.put(stored)
    failed = cache_children(ctl, first)[0]
    ctl.jobs.store.put({**failed, "status": {"conditions": [{"type": "Failed", "status": "True"}]}})

    await ctl.reconcile("ns/js")  # a Job failed: the restart is recorded (restarts: 1)
    assert stored["status"]["restarts"] == 1
    ctl.jobsets.store.put(stored)
    await ctl.reconcile("ns/js")  # the first attempt's Jobs are deleted
    restart = executor.plans[-1]
    assert sorted(delete.uid for delete in restart.jobs_to_delete) == ["job-0", "job-1"]
    await ctl.reconcile("ns/js")  # another event: the cache still shows both Jobs live
    assert all(
        plan.jobs_to_delete == () for plan in executor.plans[executor.plans.index(restart) + 1 :]
    )
