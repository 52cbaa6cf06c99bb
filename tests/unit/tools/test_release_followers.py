"""`jobset-controller release-followers` (docs/operations.md#rollback): gated followers whose
leader is bound get its domain and lose our gate; the others are reported, never deleted."""

from __future__ import annotations

import io
from typing import Any

from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_GATE, PLACEMENT_LABEL
from jobset_controller.runtime.client import NotFound
from jobset_controller.tools.followers import release_once


def pod(job: str, index: int, *, node: str = "", gated: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "other"}, {"name": PLACEMENT_GATE}]
    return {
        "metadata": {
            "name": f"{job}-{index}-x", "namespace": "ns", "uid": f"{job}-{index}",
            "labels": {PLACEMENT_LABEL: LEADER_FOLLOWER, "jobset.sigs.k8s.io/jobset-name": "js",
                       "jobset.sigs.k8s.io/replicatedjob-name": "w",
                       "jobset.sigs.k8s.io/job-index": job[-1]},
            "annotations": {"jobset.sigs.k8s.io/jobset-name": "js",
                            "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
                            "batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [{"uid": job, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }  # fmt: skip


class FakeClient:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.calls: list[tuple[str, str, Any]] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls.append(("GET", path, params))
        if path.endswith("/pods"):
            return {"items": self.pods}
        if path == "/api/v1/nodes/n1":
            return {"metadata": {"labels": {"rack": "r1"}}}
        raise NotFound(404, {}, "GET", path)

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.calls.append((method, path, kw.get("body")))
        return {}


async def test_releases_followers_of_bound_leaders_and_reports_the_others() -> None:
    client = FakeClient([
        pod("js-w-0", 0, node="n1"), pod("js-w-0", 1, gated=True),
        pod("js-w-1", 0), pod("js-w-1", 1, gated=True),
    ])  # fmt: skip
    out = io.StringIO()
    waiting = await release_once(client, None, out, set())  # type: ignore[arg-type]
    assert waiting == ["ns/js-w-1-1-x"]
    (listing,) = [c for c in client.calls if c[1] == "/api/v1/pods"]
    assert listing[2] == {"labelSelector": f"{PLACEMENT_LABEL}={LEADER_FOLLOWER}"}
    writes = [c for c in client.calls if c[0] != "GET"]
    assert writes == [
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/js-w-0-1-x",
            {
                "spec": {
                    "nodeSelector": {"rack": "r1"},
                    "schedulingGates": [{"name": PLACEMENT_GATE, "$patch": "delete"}],
                }
            },
        )
    ]  # fmt: skip  (no DELETE ever)
    assert "pod ns/js-w-0-1-x released: rack=r1" in out.getvalue()
    assert "pod ns/js-w-1-1-x waits" in out.getvalue()
