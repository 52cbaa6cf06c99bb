"""The pod and node caches hold one copy of the strings many entries carry alike (issue 45): at
10,000 pods the parser's per-pod copies of the namespace, label values, owner uid and node name
were about a fifth of the pod cache."""

from __future__ import annotations

from typing import Any

import orjson

from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_LABEL
from jobset_controller.controller.pods import trim_in_place, trim_node, trim_pod


def parsed_pod(index: int) -> dict[str, Any]:
    """A placed pod of Job `js-w-0` as its own list or watch answer gives it: every string a
    fresh object, as the JSON parser makes them."""
    body = {
        "metadata": {
            "name": f"js-w-0-{index}-x",
            "namespace": "team-a",
            "uid": f"pod-uid-{index}",
            "resourceVersion": str(100 + index),
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "jobset.sigs.k8s.io/replicatedjob-name": "w",
                "jobset.sigs.k8s.io/job-index": "0",
                "jobset.sigs.k8s.io/job-key": "4f0c3b2a9d",
                PLACEMENT_LABEL: LEADER_FOLLOWER,
            },
            "annotations": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
                "jobset.sigs.k8s.io/in-place-restart-attempt": "0",
            },
            "ownerReferences": [{"uid": "job-uid-0", "controller": True}],
        },
        "spec": {"nodeName": "node-7", "nodeSelector": {"rack": "rack-3"}},
        "status": {"phase": "Running"},
    }
    return orjson.loads(orjson.dumps(body))  # type: ignore[no-any-return]


def test_pods_of_one_job_share_their_common_strings_in_the_cache() -> None:
    first, second = (trim_in_place(parsed_pod(i)) for i in (1, 2))
    for section, key in (("metadata", "namespace"), ("spec", "nodeName"), ("status", "phase")):
        assert first[section][key] is second[section][key], key
    for field in ("labels", "annotations"):
        for key, value in first["metadata"][field].items():
            assert value is second["metadata"][field][key], (field, key)
    owners = [pod["metadata"]["ownerReferences"][0]["uid"] for pod in (first, second)]
    assert owners[0] is owners[1]
    assert first["spec"]["nodeSelector"]["rack"] is second["spec"]["nodeSelector"]["rack"]


def test_sharing_keeps_what_the_trim_returns() -> None:
    pod = parsed_pod(1)
    assert trim_pod(pod) == {
        "metadata": {
            "name": "js-w-0-1-x",
            "namespace": "team-a",
            "uid": "pod-uid-1",
            "resourceVersion": "101",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "jobset.sigs.k8s.io/replicatedjob-name": "w",
                "jobset.sigs.k8s.io/job-index": "0",
                "jobset.sigs.k8s.io/job-key": "4f0c3b2a9d",
                PLACEMENT_LABEL: LEADER_FOLLOWER,
            },
            "annotations": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
            },
            "ownerReferences": [{"uid": "job-uid-0", "controller": True}],
        },
        "spec": {"nodeName": "node-7", "nodeSelector": {"rack": "rack-3"}},
        "status": {"phase": "Running"},
    }


def test_nodes_of_one_domain_share_their_label_values() -> None:
    def node(name: str) -> dict[str, Any]:
        body = {"metadata": {"name": name, "uid": name, "labels": {"rack": "rack-3"}}}
        return orjson.loads(orjson.dumps(body))  # type: ignore[no-any-return]

    first, second = trim_node(node("node-1")), trim_node(node("node-2"))
    assert first["metadata"]["labels"] == {"rack": "rack-3"}
    assert first["metadata"]["labels"]["rack"] is second["metadata"]["labels"]["rack"]
