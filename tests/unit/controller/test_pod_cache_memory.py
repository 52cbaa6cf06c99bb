"""What the pod and node caches cost per entry (issue 45): the pod cache holds each trimmed pod
as deflated JSON, and the node cache one copy of each label value, so that tens of thousands of
training pods and thousands of nodes fit a small controller (hack/bench/pod_scale_bench.py)."""

from __future__ import annotations

from typing import Any

import orjson
from tests.unit.controller.conftest import ListingServer, synced_pod_controller

from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_LABEL
from jobset_controller.controller.pods import (
    LARGE_OBJECT_PAGE,
    LEADER_NAME,
    trim_node,
)


def placed_pod(index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"js-w-0-{index}-x",
            "namespace": "team-a",
            "uid": f"pod-uid-{index}",
            "resourceVersion": str(100 + index),
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "jobset.sigs.k8s.io/job-key": "4f0c3b2a9d",
                PLACEMENT_LABEL: LEADER_FOLLOWER,
            },
            "annotations": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            "ownerReferences": [{"uid": "job-uid-0", "controller": True}],
        },
        "spec": {"nodeName": "node-7", "containers": [{"name": "trainer", "image": "x" * 200}]},
        "status": {"phase": "Running"},
    }


async def test_the_pod_cache_holds_each_pod_as_a_few_compressed_bytes() -> None:
    controller = await synced_pod_controller(ListingServer([placed_pod(i) for i in range(50)]))
    held = controller.pods.store._items  # what the cache keeps, not what a read returns
    assert len(held) == 50
    assert all(isinstance(entry, bytes) for entry in held.values())
    # The first pod primes the compression: the others are their differences (name, uid,
    # resourceVersion, index), a small part of their trimmed JSON.
    trimmed_json = len(orjson.dumps(controller.pods.store.get("team-a/js-w-0-1-x")))
    assert max(len(entry) for key, entry in held.items() if key != "team-a/js-w-0-0-x") < (
        trimmed_json / 3
    )


async def test_a_pod_read_from_the_cache_is_the_callers_own() -> None:
    """A read parses a fresh dict: a caller that changes it (a plan's working copy, the webhook
    thread) cannot change the cache or what another reader sees."""
    controller = await synced_pod_controller(ListingServer([placed_pod(0), placed_pod(1)]))
    first = controller.pods.store.get("team-a/js-w-0-1-x")
    assert first is not None
    first["spec"]["nodeName"] = "elsewhere"
    again = controller.pods.store.get("team-a/js-w-0-1-x")
    assert again is not None
    assert again["spec"]["nodeName"] == "node-7"
    (leader,) = controller.pods.store.by_index(LEADER_NAME, "team-a/js-w-0-0")
    assert leader["metadata"]["name"] == "js-w-0-0-x"
    assert "containers" not in leader["spec"]


async def test_the_first_pod_list_comes_in_pages_of_100() -> None:
    """A page's parse leaves part of its peak in the allocator (runtime/informer.py): pods are
    the largest objects the controller lists by the thousand."""
    server = ListingServer([placed_pod(0)])
    await synced_pod_controller(server)
    assert [params["limit"] for _, params in server.asked] == [LARGE_OBJECT_PAGE]
    assert LARGE_OBJECT_PAGE == 100


def test_nodes_of_one_domain_share_their_label_values() -> None:
    def node(name: str) -> dict[str, Any]:
        body = {"metadata": {"name": name, "uid": name, "labels": {"rack": "rack-3"}}}
        return orjson.loads(orjson.dumps(body))  # type: ignore[no-any-return]

    first, second = trim_node(node("node-1")), trim_node(node("node-2"))
    assert first["metadata"]["labels"] == {"rack": "rack-3"}
    assert first["metadata"]["labels"]["rack"] is second["metadata"]["labels"]["rack"]
