"""Which pods the placement cache keeps (issue 23): decided by the pod's annotations as upstream
decides, so the pods of Jobs upstream created are there for the leader lookups and repairs."""

from __future__ import annotations

from typing import Any

from tests.unit.controller.conftest import ListingServer, synced_pod_controller

from jobset_controller.api import JOB_KEY
from jobset_controller.api.placement import (
    LEADER_FOLLOWER,
    PLACEMENT_GATE,
    PLACEMENT_LABEL,
    exclusive_terms,
    with_terms,
)
from jobset_controller.controller.pods import keep_pod, trim_pod


def pod(*, ours: bool, exclusive: bool = True, strategy: bool = False) -> dict[str, Any]:
    labels = {"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/job-key": "k"}
    if ours:
        labels[PLACEMENT_LABEL] = LEADER_FOLLOWER
    annotations = {
        "jobset.sigs.k8s.io/jobset-name": "js",
        "batch.kubernetes.io/job-completion-index": "1",
    }
    if exclusive:
        annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = "rack"
    if strategy:
        annotations["alpha.jobset.sigs.k8s.io/node-selector"] = "true"
    return {
        "metadata": {"name": "js-w-0-1-x", "namespace": "ns", "uid": "u", "labels": labels,
                     "annotations": annotations,
                     "ownerReferences": [{"uid": "job", "controller": True}]},
        "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": PLACEMENT_GATE}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip


async def test_the_watch_selects_every_pod_of_a_jobsets_job() -> None:
    """By the job-key label, which every pod of a JobSet's Job carries: also a follower made by
    hand without the jobset-name label (out of the webhooks' sight), which must still be evicted
    when misplaced."""
    hand_made = pod(ours=False)
    del hand_made["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]
    server = ListingServer([hand_made])
    controller = await synced_pod_controller(server)
    (path, params), *_ = server.asked
    assert path == "/api/v1/pods"
    assert params["labelSelector"] == JOB_KEY
    assert [p["metadata"]["name"] for p in controller.pods.store] == ["js-w-0-1-x"]


def test_pods_of_our_jobs_and_of_upstreams_are_kept_trimmed() -> None:
    for candidate in (pod(ours=True), pod(ours=False)):
        trimmed = trim_pod(candidate)
        assert keep_pod(trimmed)
        assert "containers" not in trimmed["spec"]
        assert trimmed["spec"]["schedulingGates"] == [{"name": PLACEMENT_GATE}]
        assert trimmed["metadata"]["ownerReferences"] == [{"uid": "job", "controller": True}]


def test_other_jobset_pods_are_dropped_on_arrival() -> None:
    fallback = pod(ours=False)
    fallback["spec"]["affinity"] = with_terms(None, exclusive_terms("k", "rack", None))
    for candidate in (pod(ours=False, exclusive=False), pod(ours=False, strategy=True), fallback):
        trimmed = trim_pod(candidate)
        assert not keep_pod(trimmed)
        assert set(trimmed) == {"metadata"}
        assert set(trimmed["metadata"]) <= {"name", "namespace", "uid", "resourceVersion"}
