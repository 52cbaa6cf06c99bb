"""Exclusive placement end to end, in both follower modes: pod webhooks, pod controller, scheduler.

A cluster of its own (4 racks x 2 kwok nodes, module-scoped): the pod webhook configurations
select every JobSet pod, so no other test's controller may see these JobSets. For each mode
(Gate, Reject, and Reject with followers narrowed to their domain's nodes by name) one `run`
process serves the pod webhooks by URL on 127.0.0.1, and every test
checks: each Job's pods in one rack, no two Jobs in one rack, followers never bound before their
leader; a misplaced follower is evicted; a restart re-places every Job; exclusivity holds only
among equal priorities.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_LABEL
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import RUN_FOREVER_ANNOTATION
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import RACK_LABEL
from jobset_controller_dev.envtest.placement import PlacementController
from jobset_controller_dev.envtest.polling import scaled

pytestmark = pytest.mark.e2e

EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
INDEX = "batch.kubernetes.io/job-completion-index"
HIGH = "placement-e2e-high"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullCluster]:
    full = FullCluster().start()
    try:
        status, reply = full.request(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": HIGH}, "value": 1000},
        )
        assert status in (201, 409), reply
        yield full
    finally:
        full.stop()


# Narrow: Reject with `exclusivePlacement.followerNodeAffinity` (followers name their domain's
# nodes); every test holds for it as for the others.
MODES: dict[str, dict[str, Any]] = {
    "Gate": {"followers": "Gate"},
    "Reject": {"followers": "Reject"},
    "Narrow": {"followers": "Reject", "followerNodeAffinity": True},
}


@pytest.fixture(scope="module", params=list(MODES))
def mode(
    request: pytest.FixtureRequest, cluster: FullCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir: Path = tmp_path_factory.mktemp(f"placement-{request.param}")
    placement = MODES[request.param]
    sections = {"exclusivePlacement": placement}
    with PlacementController(cluster, workdir, placement["followers"], sections=sections):
        yield str(request.param)


@pytest.fixture
def ns(cluster: FullCluster, mode: str) -> Iterator[str]:
    name = cluster.create_namespace(f"place-{mode.lower()}-{uuid.uuid4().hex[:6]}")
    try:
        yield name
    finally:
        cluster.delete_namespace(name)


def jobset(
    name: str, jobs: int, pods: int, *, priority_class: str | None = None, **spec: Any
) -> dict[str, Any]:
    workers = replicated_job(
        "w",
        jobs,
        pods=pods,
        backoff_limit=0,
        annotations={RUN_FOREVER_ANNOTATION: "true"},
        pod_spec={"priorityClassName": priority_class} if priority_class else None,
    )
    return jobset_manifest(
        name, replicated_jobs=[workers], annotations={EXCLUSIVE: RACK_LABEL}, **spec
    )


def create(cluster: FullCluster, ns: str, body: dict[str, Any]) -> None:
    status, reply = cluster.request(
        "POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body
    )
    assert status == 201, reply


def pods_of(cluster: FullCluster, ns: str, js: str) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.list_items(
            f"/api/v1/namespaces/{ns}/pods", label_selector=f"{JOBSET_NAME}={js}"
        )
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Failed", "Succeeded")
    ]


def wait_bound(
    cluster: FullCluster,
    ns: str,
    js: str,
    count: int,
    *,
    attempt: str | None = None,
    timeout: float = 90,
) -> list[dict[str, Any]]:
    """The JobSet's `count` live pods (of `attempt`) once all are bound, within `timeout` s
    (scaled here: `polling.scaled`); the error lists the pods and their nodes last seen."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        pods = [
            p
            for p in pods_of(cluster, ns, js)
            if attempt is None
            or p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == attempt
        ]
        if len(pods) == count and all(p["spec"].get("nodeName") for p in pods):
            return pods
        if time.monotonic() > deadline:
            state = [(p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods]
            raise AssertionError(
                f"{js}: {count} pods not bound within {scaled(timeout):g} s: {state}"
            )
        time.sleep(0.3)  # poll interval of the wait for the bound pods


def rack_of(cluster: FullCluster, node: str) -> str:
    status, body = cluster.request("GET", f"/api/v1/nodes/{node}")
    assert status == 200, body
    return str(body["metadata"]["labels"][RACK_LABEL])


def scheduled_at(pod: dict[str, Any]) -> datetime.datetime:
    for condition in pod["status"].get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition["status"] == "True":
            return datetime.datetime.fromisoformat(condition["lastTransitionTime"])
    raise AssertionError(f"{pod['metadata']['name']} not scheduled")


def assert_exclusive(cluster: FullCluster, pods: list[dict[str, Any]]) -> dict[str, str]:
    """Each Job in one rack, no rack shared, followers bound no earlier than their leader;
    returns job-key -> rack."""
    racks: dict[str, set[str]] = {}
    leaders: dict[str, dict[str, Any]] = {}
    for pod in pods:
        key = pod["metadata"]["labels"][JOB_KEY]
        racks.setdefault(key, set()).add(rack_of(cluster, pod["spec"]["nodeName"]))
        if pod["metadata"]["annotations"][INDEX] == "0":
            leaders[key] = pod
    assert all(len(r) == 1 for r in racks.values()), f"a Job spans racks: {racks}"
    chosen = {key: next(iter(r)) for key, r in racks.items()}
    assert len(set(chosen.values())) == len(chosen), f"two Jobs share a rack: {chosen}"
    for pod in pods:
        leader = leaders[pod["metadata"]["labels"][JOB_KEY]]
        assert scheduled_at(pod) >= scheduled_at(leader), (
            f"{pod['metadata']['name']} before its leader"
        )
        assert pod["metadata"]["labels"].get(PLACEMENT_LABEL) == LEADER_FOLLOWER
    return chosen


def test_each_job_gets_a_rack_of_its_own_and_followers_follow(
    cluster: FullCluster, ns: str, mode: str
) -> None:
    create(cluster, ns, jobset("spread", jobs=4, pods=3))
    pods = wait_bound(cluster, ns, "spread", 12)
    assert_exclusive(cluster, pods)
    jobs = cluster.list_items(f"/apis/batch/v1/namespaces/{ns}/jobs")
    assert all("affinity" not in j["spec"]["template"]["spec"] for j in jobs)
    refused = [
        e
        for e in cluster.list_items(f"/api/v1/namespaces/{ns}/events")
        if e.get("reason") == "FailedCreate"
    ]
    if mode == "Gate":
        assert refused == [], [e["message"] for e in refused]


def test_narrowed_followers_require_exactly_their_racks_nodes_by_name(
    cluster: FullCluster, ns: str, mode: str
) -> None:
    create(cluster, ns, jobset("named", jobs=2, pods=3))
    pods = wait_bound(cluster, ns, "named", 6)
    racks = assert_exclusive(cluster, pods)
    nodes_of: dict[str, list[str]] = {}
    for node in cluster.list_items("/api/v1/nodes"):
        rack = node["metadata"]["labels"].get(RACK_LABEL)
        if rack is not None:
            nodes_of.setdefault(rack, []).append(node["metadata"]["name"])
    for pod in pods:
        affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
        terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms"
        )
        if mode != "Narrow" or pod["metadata"]["annotations"][INDEX] == "0":
            assert terms is None, f"{pod['metadata']['name']}: {terms}"
            continue
        rack = racks[pod["metadata"]["labels"][JOB_KEY]]
        assert terms == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            for node in sorted(nodes_of[rack])
        ], pod["metadata"]["name"]


def test_a_misplaced_follower_is_evicted(cluster: FullCluster, ns: str, mode: str) -> None:
    create(cluster, ns, jobset("repair", jobs=1, pods=2))
    pods = wait_bound(cluster, ns, "repair", 2)
    (rack,) = assert_exclusive(cluster, pods).values()
    leader = next(p for p in pods if p["metadata"]["annotations"][INDEX] == "0")
    job = leader["metadata"]["ownerReferences"][0]
    other = next(f"rack-{i}" for i in range(4) if f"rack-{i}" != rack)
    labels = {
        k: v
        for k, v in leader["metadata"]["labels"].items()
        if k.startswith("jobset.sigs.k8s.io/") and k != JOBSET_NAME  # out of the webhooks' sight
    }
    annotations = {**leader["metadata"]["annotations"], INDEX: "1"}
    by_hand = {
        "metadata": {
            "name": "repair-w-0-1-by-hand",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [job],
        },
        "spec": {
            "nodeSelector": {RACK_LABEL: other},
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }
    status, reply = cluster.request("POST", f"/api/v1/namespaces/{ns}/pods", by_hand)
    assert status == 201, reply
    cluster.wait_for(
        f"/api/v1/namespaces/{ns}/pods/repair-w-0-1-by-hand",
        lambda body: not body or body["metadata"].get("deletionTimestamp"),
        timeout=30,
        what="misplaced follower deleted",
    )
    # The event is recorded beside the delete, not before it: wait for it too.
    cluster.wait_for(
        f"/apis/events.k8s.io/v1/namespaces/{ns}/events",
        lambda body: any(
            e.get("reason") == "ExclusivePlacementViolation"
            and e["regarding"]["name"] == "repair-w-0-1-by-hand"
            for e in body.get("items") or ()
        ),
        timeout=30,
        what="ExclusivePlacementViolation event on the misplaced follower",
    )
    assert_exclusive(cluster, wait_bound(cluster, ns, "repair", 2))


def test_a_restart_re_places_every_job(cluster: FullCluster, ns: str, mode: str) -> None:
    create(cluster, ns, jobset("again", jobs=4, pods=2, failurePolicy={"maxRestarts": 2}))
    pods = wait_bound(cluster, ns, "again", 8, attempt="0")
    assert_exclusive(cluster, pods)
    # A deleted pod fails its Job (backoffLimit 0): the JobSet restarts, every Job is recreated.
    victim = pods[0]["metadata"]["name"]
    cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{victim}")
    again = wait_bound(cluster, ns, "again", 8, attempt="1", timeout=120)
    assert_exclusive(cluster, again)


def test_exclusivity_holds_only_among_equal_priorities(
    cluster: FullCluster, ns: str, mode: str
) -> None:
    create(cluster, ns, jobset("low", jobs=4, pods=2))
    assert_exclusive(cluster, wait_bound(cluster, ns, "low", 8))
    create(cluster, ns, jobset("high", jobs=1, pods=2, priority_class=HIGH))
    high = wait_bound(cluster, ns, "high", 2)
    assert_exclusive(cluster, high)  # shares a rack with a low Job: allowed across priorities
    create(cluster, ns, jobset("same", jobs=1, pods=2))
    # Wait until the scheduler has tried and refused (PodScheduled False: Unschedulable), not for
    # a fixed time: on a loaded machine the pods may not even exist after a few seconds.
    deadline = time.monotonic() + scaled(90)
    while True:
        same = pods_of(cluster, ns, "same")
        refused = [
            p
            for p in same
            for c in (p.get("status") or {}).get("conditions") or ()
            if c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ]
        if refused or time.monotonic() > deadline:
            break
        time.sleep(0.3)  # poll interval of the wait for the refusal
    assert same, "the equal-priority JobSet has no pods"
    seen = [(p["metadata"]["name"], (p.get("status") or {}).get("conditions")) for p in same]
    assert refused, (
        f"the scheduler did not refuse the equal-priority leader within {scaled(90):g} s: {seen}"
    )
    assert not any(p["spec"].get("nodeName") for p in same), "equal priority shared a rack"
