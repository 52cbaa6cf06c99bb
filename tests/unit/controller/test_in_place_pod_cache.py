"""The pod cache with the InPlaceRestart gate (issue 25): every JobSet pod kept, trimmed to what
the in-place pass reads, indexed by JobSet; a change of those facts wakes an in-place JobSet,
and only one."""

from __future__ import annotations

from typing import Any

from tests.unit.controller.conftest import PlanRecorder, offline_controller

from jobset_controller.api import FeatureGates
from jobset_controller.controller.pods import (
    JOBSET_PODS,
    PodPlacementController,
    keep_pod,
    trim_in_place,
    trim_pod,
)

ATTEMPT = "jobset.sigs.k8s.io/in-place-restart-attempt"


def pod(attempt: str | None = "0", *, restarts: int = 0, phase: str = "Running") -> dict[str, Any]:
    annotations = {"jobset.sigs.k8s.io/jobset-name": "js", "other": "x" * 100}
    if attempt is not None:
        annotations[ATTEMPT] = attempt
    return {
        "metadata": {
            "name": "js-w-0-0-abc",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": "7",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/job-key": "k"},
            "annotations": annotations,
            "ownerReferences": [{"uid": "job", "controller": True}],
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A"}]}]},
        "status": {
            "phase": phase,
            "initContainerStatuses": [{"name": "agent", "restartCount": restarts}],
            "containerStatuses": [{"name": "c", "restartCount": 1, "image": "i"}],
        },
    }


def test_without_the_gate_jobset_pods_not_placed_are_still_dropped() -> None:
    assert not keep_pod(trim_pod(pod()))


def test_with_the_gate_a_jobset_pod_is_kept_with_only_the_in_place_facts() -> None:
    trimmed = trim_in_place(pod(restarts=3))
    assert keep_pod(trimmed)
    assert trimmed == {
        "metadata": {
            "name": "js-w-0-0-abc",
            "namespace": "ns",
            "uid": "pod-uid",
            "resourceVersion": "7",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "js"},
            "annotations": {ATTEMPT: "0"},
        },
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": 3}]},
    }


def test_a_pod_without_the_jobset_label_is_not_kept() -> None:
    other = pod()
    del other["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]
    assert not keep_pod(trim_in_place(other))


def pod_controller(woken: list[str]) -> PodPlacementController:
    ctl = PodPlacementController(
        object(),  # type: ignore[arg-type]  # informers are not started here
        enqueue=lambda key: None,
        recorder=object(),  # type: ignore[arg-type]
        in_place_restart=True,
    )
    ctl.on_jobset_pod = woken.append
    return ctl


def test_pods_are_indexed_by_jobset() -> None:
    ctl = pod_controller([])
    ctl.pods.store.put(trim_in_place(pod()))
    assert [p["metadata"]["name"] for p in ctl.pods.store.by_index(JOBSET_PODS, "ns/js")] == [
        "js-w-0-0-abc"
    ]


def test_a_change_of_the_attempt_phase_or_restarts_wakes_the_jobset() -> None:
    woken: list[str] = []
    handlers = pod_controller(woken).pods.handlers
    before = trim_in_place(pod("0"))
    handlers.on_add(before)
    for after in (pod("1"), pod("0", phase="Failed"), pod("0", restarts=2)):
        handlers.on_update(before, trim_in_place(after))
    handlers.on_delete(before)
    assert woken == ["ns/js"] * 5


def test_a_change_the_pass_does_not_read_wakes_nothing() -> None:
    woken: list[str] = []
    handlers = pod_controller(woken).pods.handlers
    newer = pod("0")
    newer["metadata"]["resourceVersion"] = "8"
    newer["metadata"]["annotations"]["other"] = "changed"
    handlers.on_update(trim_in_place(pod("0")), trim_in_place(newer))
    assert woken == []


def jobset(strategy: str) -> dict[str, Any]:
    template = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 2**31 - 1,
        "podReplacementPolicy": "Failed",
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns", "uid": "u", "resourceVersion": "5"},
        "spec": {
            "failurePolicy": {"maxRestarts": 1, "restartStrategy": strategy},
            "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": template}}],
        },
    }


def test_only_a_jobset_using_the_strategy_is_woken_by_its_pods() -> None:
    woken: list[str] = []
    pods = pod_controller([])
    ctl = offline_controller(PlanRecorder(), pods=pods.pods)
    ctl._enqueue = woken.append
    ctl.jobsets.store.put(jobset("Recreate"))
    ctl.pod_changed("ns/js")
    assert woken == []
    ctl.jobsets.store.put(jobset("InPlaceRestart"))
    ctl.pod_changed("ns/js")
    ctl.pod_changed("ns/gone")
    assert woken == ["ns/js"]


async def test_a_pass_reads_the_jobsets_pods_from_the_cache() -> None:
    executor = PlanRecorder()
    pods = pod_controller([])
    ctl = offline_controller(executor, pods=pods.pods)
    ctl._features = FeatureGates(in_place_restart=True)
    ctl.jobsets.store.put(jobset("InPlaceRestart"))
    pods.pods.store.put(trim_in_place(pod("0", restarts=2)))  # above maxRestarts 1
    await ctl.reconcile("ns/js")
    status = executor.plans[0].status or {}
    failed = [c for c in status.get("conditions", []) if c["type"] == "Failed"]
    assert [c["reason"] for c in failed] == ["ReachedMaxRestarts"]
