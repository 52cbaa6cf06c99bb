"""Gang scheduling's shell (controller.gang): discovery of the Workload/PodGroup API and
what the caches keep of those objects (docs/behaviour.md#gang-scheduling)."""

from __future__ import annotations

from typing import Any

from jobset_controller.controller.gang import scheduling_api_served, trim_scheduling_object
from jobset_controller.controller.informers import trim_job
from jobset_controller.runtime.client import NotFound


class Discovery:
    """A client whose only call is the discovery GET."""

    def __init__(self, answer: dict[str, Any] | None) -> None:
        self.answer = answer
        self.paths: list[str] = []

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        self.paths.append(path)
        if self.answer is None:
            raise NotFound(404, {"reason": "NotFound"})
        return self.answer


async def test_the_api_is_served_when_discovery_lists_workloads_and_podgroups() -> None:
    client = Discovery({"resources": [{"name": "workloads"}, {"name": "podgroups"}]})
    assert await scheduling_api_served(client)  # type: ignore[arg-type]
    assert client.paths == ["/apis/scheduling.k8s.io/v1beta1"]


async def test_a_missing_group_version_means_not_served() -> None:
    assert not await scheduling_api_served(Discovery(None))  # type: ignore[arg-type]


async def test_workloads_without_podgroups_means_not_served() -> None:
    client = Discovery({"resources": [{"name": "workloads"}]})
    assert not await scheduling_api_served(client)  # type: ignore[arg-type]


def test_the_cache_keeps_identity_owners_deletion_and_the_scheduling_policy() -> None:
    pod_group = {
        "metadata": {
            "name": "js-abc",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "3",
            "ownerReferences": [{"kind": "JobSet", "uid": "j"}],
            "deletionTimestamp": "2026-11-26T06:00:00Z",
            "managedFields": [{}],
            "labels": {"a": "b"},
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "workloadRef": {"workloadName": "js-w", "templateName": "js"},
            "resourceClaims": [{"name": "c"}],
        },
        "status": {"conditions": [], "resourceClaimStatuses": [{"name": "c"}]},
    }
    assert trim_scheduling_object(pod_group) == {
        "metadata": {
            "name": "js-abc",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "3",
            "ownerReferences": [{"kind": "JobSet", "uid": "j"}],
            "deletionTimestamp": "2026-11-26T06:00:00Z",
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "workloadRef": {"workloadName": "js-w", "templateName": "js"},
        },
    }


def test_the_cache_keeps_the_schedulers_initially_scheduled_condition_only() -> None:
    """Reconcile reports an unschedulable gang on the JobSet: that needs the condition."""
    condition = {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Too many pods.",
    }
    pod_group = {
        "metadata": {"name": "js-abc", "namespace": "ns", "uid": "u"},
        "spec": {},
        "status": {
            "conditions": [
                {**condition, "lastTransitionTime": "2026-11-26T06:00:00Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            ]
        },
    }
    assert trim_scheduling_object(pod_group)["status"] == {"conditions": [condition]}


def test_the_job_cache_keeps_the_pods_pod_group_link() -> None:
    """A resume compares it with the PodGroup the spec gives the Job now (a regrouping while
    suspended strands the Job otherwise): the trimmed Job must still carry it."""
    job = {
        "metadata": {"name": "js-w-0", "annotations": {"a": "b"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "schedulingGroup": {"podGroupName": "js-0123456789"},
                    "containers": [{"name": "c", "image": "i"}],
                    "volumes": [{"name": "v"}],
                }
            },
        },
    }
    trimmed = trim_job(job)
    assert trimmed["spec"]["template"]["spec"]["schedulingGroup"] == {
        "podGroupName": "js-0123456789"
    }
    assert "volumes" not in trimmed["spec"]["template"]["spec"]
