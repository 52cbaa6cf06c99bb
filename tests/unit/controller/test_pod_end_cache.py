"""The pod cache keeps every failed or terminating JobSet pod, trimmed to its end; the pod
controller force-deletes a pod stuck on a dead node as the pod garbage collector would.

See docs/behaviour.md#pods-on-unreachable-nodes and #restart-timeline.
"""

from __future__ import annotations

import datetime
from typing import Any

from jobset_controller.api.pod_status import end_facts, failing_container, merge_end_facts
from jobset_controller.controller.pods import (
    FAILED_PODS,
    PodPlacementController,
    keep_pod,
    trim_node,
    trim_pod,
)
from jobset_controller.runtime.events import ObjectRef

NOW = datetime.datetime(2025, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
JOBSET = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"


def pod(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {
            "name": "js-w-0-0-abc",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": "7",
            "labels": {JOBSET: "js", JOBSET_UID: "js-uid", "jobset.sigs.k8s.io/job-key": "k"},
            "annotations": {JOBSET: "js", "big": "x" * 1000},
            "ownerReferences": [{"uid": "job-uid", "controller": True, "kind": "Job"}],
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"nodeName": "n-1", "containers": [{"name": "main", "env": [{"name": "A"}]}]},
        "status": {"phase": "Running"},
    }
    for section, values in changes.items():
        base[section].update(values)
    return base


def failed() -> dict[str, Any]:
    return pod(
        status={
            "phase": "Failed",
            "message": "m" * 1000,
            "initContainerStatuses": [
                {"name": "init", "state": {"terminated": {"exitCode": 0, "finishedAt": "t0"}}}
            ],
            "containerStatuses": [
                {
                    "name": "late",
                    "state": {"terminated": {"exitCode": 2, "finishedAt": "2025-06-01T11:10:00Z"}},
                },
                {
                    "name": "main",
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "finishedAt": "2025-06-01T11:00:00Z",
                        }
                    },
                },
            ],
        }
    )


def test_a_running_pod_not_placed_by_leader_is_still_dropped() -> None:
    assert not keep_pod(trim_pod(pod()))


def test_a_failed_pod_is_kept_with_only_its_end() -> None:
    trimmed = trim_pod(failed())
    assert keep_pod(trimmed)
    assert trimmed == {
        "metadata": {
            "name": "js-w-0-0-abc",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": "7",
            "labels": {JOBSET: "js", JOBSET_UID: "js-uid"},
            "ownerReferences": [{"uid": "job-uid", "controller": True}],
        },
        "spec": {"nodeName": "n-1"},
        "status": {
            "phase": "Failed",
            "message": "m" * 256,
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "finishedAt": "2025-06-01T11:00:00Z",
                        }
                    },
                }
            ],
        },
    }


def test_the_failing_container_is_the_first_to_exit_non_zero() -> None:
    container = failing_container(failed())
    assert container is not None
    assert (container.name, container.exit_code) == ("main", 137)


def test_a_terminating_pod_is_kept_with_its_deletion_times() -> None:
    terminating = pod(
        metadata={"deletionTimestamp": "2025-06-01T12:00:30Z", "deletionGracePeriodSeconds": 30}
    )
    trimmed = trim_pod(terminating)
    assert keep_pod(trimmed)
    assert trimmed["metadata"]["deletionTimestamp"] == "2025-06-01T12:00:30Z"
    assert trimmed["metadata"]["deletionGracePeriodSeconds"] == 30
    assert trimmed["spec"] == {"nodeName": "n-1"}


def test_placement_fields_win_when_a_placed_pod_ends() -> None:
    placed = {"metadata": {"name": "p", "labels": {"x": "1"}}, "spec": {"nodeName": "n-9"}}
    merged = merge_end_facts(placed, failed())
    assert merged["spec"]["nodeName"] == "n-9"
    assert merged["metadata"]["labels"] == {JOBSET: "js", JOBSET_UID: "js-uid", "x": "1"}
    assert merged["status"]["phase"] == "Failed"
    assert end_facts(failed())["status"]["phase"] == "Failed"


def test_a_node_keeps_only_its_dead_node_taints() -> None:
    node = {
        "metadata": {"name": "n", "labels": {"rack": "r"}, "annotations": {"a": "b"}},
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "t"},
                {"key": "dedicated", "effect": "NoSchedule"},
            ]
        },
        "status": {"capacity": {"cpu": "8"}},
    }
    assert trim_node(node) == {
        "metadata": {"name": "n", "labels": {"rack": "r"}},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
    }


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path, kwargs.get("body")))
        return {}

    async def delete(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DELETE", path, kwargs))
        return {}


class RecordingRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[ObjectRef, str, str, str]] = []

    def record(self, ref: ObjectRef, type_: str, reason: str, note: str) -> None:
        self.events.append((ref, type_, reason, note))


def controller(client: RecordingClient, recorder: RecordingRecorder, **options: Any) -> Any:
    return PodPlacementController(
        client,  # type: ignore[arg-type]
        enqueue=lambda key: None,
        recorder=recorder,  # type: ignore[arg-type]
        wall=lambda: NOW,
        **options,
    )


def stuck_pod() -> dict[str, Any]:
    return pod(
        metadata={"deletionTimestamp": "2025-06-01T11:59:00Z", "deletionGracePeriodSeconds": 30}
    )


def dead_node() -> dict[str, Any]:
    return {
        "metadata": {"name": "n-1", "resourceVersion": "1"},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
    }


async def test_a_stuck_pod_is_marked_failed_then_deleted_without_grace_and_reported() -> None:
    client, recorder = RecordingClient(), RecordingRecorder()
    pods = controller(client, recorder)
    pods.pods.store.put(trim_pod(stuck_pod()))
    pods.nodes.store.put(trim_node(dead_node()))
    result = await pods.reconcile("ns/job-uid")
    assert result is None
    (patch, delete) = client.calls
    assert patch[0:2] == ("PATCH", "/api/v1/namespaces/ns/pods/js-w-0-0-abc/status")
    assert patch[2]["status"]["phase"] == "Failed"
    (condition,) = patch[2]["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == (
        "DisruptionTarget",
        "DeletionByJobSetController",
    )
    assert delete[0:2] == ("DELETE", "/api/v1/namespaces/ns/pods/js-w-0-0-abc")
    assert delete[2]["grace_period_seconds"] == 0
    assert delete[2]["uid"] == "pod-uid"
    ((ref, type_, reason, note),) = recorder.events
    assert (ref.kind, ref.name, ref.uid) == ("JobSet", "js", "js-uid")
    assert (type_, reason) == ("Warning", "PodForceDeletedOnUnreachableNode")
    assert note == (
        "pod js-w-0-0-abc was terminating since 2025-06-01T11:58:30Z on node n-1, which is "
        "tainted node.kubernetes.io/unreachable (its kubelet cannot confirm the end); "
        "force-deleted so that its Job, and the JobSet's next attempt, are not held by it"
    )


async def test_with_force_delete_off_a_stuck_pod_is_left_alone() -> None:
    client, recorder = RecordingClient(), RecordingRecorder()
    pods = controller(client, recorder, force_delete=False)
    pods.pods.store.put(trim_pod(stuck_pod()))
    pods.nodes.store.put(trim_node(dead_node()))
    assert await pods.reconcile("ns/job-uid") is None
    assert client.calls == []
    assert recorder.events == []


async def test_a_pod_not_yet_due_requeues_its_job_at_the_bound() -> None:
    client, recorder = RecordingClient(), RecordingRecorder()
    pods = controller(client, recorder, force_delete_after=600)
    pods.pods.store.put(trim_pod(stuck_pod()))
    pods.nodes.store.put(trim_node(dead_node()))
    result = await pods.reconcile("ns/job-uid")
    assert result is not None
    assert result.requeue_after == 540.0
    assert client.calls == []


def test_failed_pods_are_found_by_their_jobset() -> None:
    pods = controller(RecordingClient(), RecordingRecorder())
    pods.pods.store.put(trim_pod(failed()))
    terminating = stuck_pod()
    terminating["metadata"].update(name="t", uid="t")
    pods.pods.store.put(trim_pod(terminating))
    assert [p["metadata"]["name"] for p in pods.failed_pods("ns", "js")] == ["js-w-0-0-abc"]
    assert [p["metadata"]["name"] for p in pods.pods.store.by_index(FAILED_PODS, "ns/js")] == [
        "js-w-0-0-abc"
    ]


def test_with_the_in_place_gate_a_failed_pod_keeps_its_failing_container_and_restart_count() -> (
    None
):
    from jobset_controller.controller.pods import trim_in_place

    ended = failed()
    ended["status"]["containerStatuses"][1]["restartCount"] = 4
    trimmed = trim_in_place(ended)
    (container,) = trimmed["status"]["containerStatuses"]
    assert container["restartCount"] == 4
    assert container["state"]["terminated"]["exitCode"] == 137
    found = failing_container(trimmed)
    assert found is not None
    assert found.name == "main"
