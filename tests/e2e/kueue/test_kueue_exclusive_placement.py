"""Exclusive placement under Kueue admission: a queued JobSet with the exclusive-topology
annotation is suspended by Kueue, admitted on a flavor that covers every kwok rack, resumed, and
then placed by the pod webhooks (leader-follower mode): each Job's pods in one rack, no rack
shared by two Jobs; it completes and its Workload finishes.

A cluster of its own (module scope, overriding the package's `kueue_cluster`): the pod webhook
configurations select every JobSet pod, and the package's controller (which serves no webhooks)
would reconcile the same JobSets, so this module runs only the placement-capable controller
(`PlacementController`, Gate mode), and its own Kueue on that cluster.

Faults found while building this: none (in the controller or the harness).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from typing import Any

import pytest

from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_LABEL
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kueue_objects import (
    KueueNamespace,
    is_true,
    jobset,
    pod_count,
    rjob,
)
from jobset_controller_dev.envtest.kwok_stages import RUN_DURATION_ANNOTATION
from jobset_controller_dev.envtest.nodes import KWOK_TYPE_LABEL, KWOK_TYPE_VALUE, RACK_LABEL
from jobset_controller_dev.envtest.placement import PlacementController
from jobset_controller_dev.envtest.processes import processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.kueue]

EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
INDEX = "batch.kubernetes.io/job-completion-index"
KEEP = os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1"


@pytest.fixture(scope="module")
def placement_cluster() -> Iterator[tuple[FullCluster, PlacementController]]:
    cluster = FullCluster(keep_workdir=KEEP).start()
    marker = str(cluster.workdir)
    try:
        workdir = cluster.workdir / "placement"
        workdir.mkdir(parents=True, exist_ok=True)
        with PlacementController(cluster, workdir, "Gate") as controller:
            yield cluster, controller
    finally:
        cluster.stop()
        leftovers = processes_mentioning(marker)
        assert leftovers == [], f"processes left running after the cluster stopped: {leftovers}"


@pytest.fixture(scope="module")
def kueue_cluster(
    placement_cluster: tuple[FullCluster, PlacementController],
) -> FullCluster:
    """Overrides the package's shared cluster (and its webhook-less controller) for this module."""
    return placement_cluster[0]


def scheduled_at(pod: dict[str, Any]) -> datetime.datetime:
    for c in pod["status"].get("conditions") or ():
        if c["type"] == "PodScheduled" and c["status"] == "True":
            return datetime.datetime.fromisoformat(c["lastTransitionTime"])
    raise AssertionError(f"{pod['metadata']['name']} not scheduled")


def test_admitted_jobset_gets_one_rack_per_job_and_finishes(
    placement_cluster: tuple[FullCluster, PlacementController], kenv: KueueNamespace
) -> None:
    """Suspended on create, admitted on the all-racks flavor, resumed; the controller is in
    leader-follower mode (pod webhooks served) and every pod carries its placement label and the
    flavor's selector; each Job's pods share one rack, no two Jobs share a rack, followers are
    bound no earlier than their leader; the JobSet completes, the Workload finishes."""
    _, controller = placement_cluster
    assert controller.mode() == "leader-follower"

    flavor = kenv.flavor("kwok", {KWOK_TYPE_LABEL: KWOK_TYPE_VALUE})
    cq = kenv.cluster_queue("cq", [(flavor, "8")])
    kenv.local_queue("lq", cq)
    body = jobset(
        "excl",
        rjob("w", replicas=3, pods=2, annotations={RUN_DURATION_ANNOTATION: "4s"}),
    )
    body["metadata"]["annotations"] = {EXCLUSIVE: RACK_LABEL}
    created = kenv.create_jobset(body)
    assert created["spec"]["suspend"] is True, "Kueue's webhook suspends a queued JobSet"
    assert created["metadata"]["annotations"][EXCLUSIVE] == RACK_LABEL

    kenv.wait_workload("excl", lambda w: is_true(w, "Admitted"), "admitted")
    kenv.wait_jobset("excl", lambda js: js["spec"].get("suspend") is False, "resumed")
    pods = kenv.wait_pods(
        "excl",
        lambda ps: len(ps) == pod_count(body) and all(p["spec"].get("nodeName") for p in ps),
        "all scheduled",
        timeout=90,
    )

    node_racks = kenv.node_racks()
    racks: dict[str, set[str]] = {}
    leaders: dict[str, dict[str, Any]] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["metadata"]["labels"].get(PLACEMENT_LABEL) == LEADER_FOLLOWER, name
        assert pod["spec"]["nodeSelector"].get(KWOK_TYPE_LABEL) == KWOK_TYPE_VALUE, name
        key = pod["metadata"]["labels"][JOB_KEY]
        racks.setdefault(key, set()).add(node_racks[pod["spec"]["nodeName"]])
        if pod["metadata"]["annotations"][INDEX] == "0":
            leaders[key] = pod
    assert len(racks) == 3, racks
    assert all(len(r) == 1 for r in racks.values()), f"a Job spans racks: {racks}"
    chosen = {key: next(iter(r)) for key, r in racks.items()}
    assert len(set(chosen.values())) == len(chosen), f"two Jobs share a rack: {chosen}"
    for pod in pods:
        leader = leaders[pod["metadata"]["labels"][JOB_KEY]]
        assert scheduled_at(pod) >= scheduled_at(leader), f"{pod['metadata']['name']} early"

    js = kenv.wait_jobset(
        "excl",
        lambda j: (j.get("status") or {}).get("terminalState") == "Completed",
        "completed",
        timeout=90,
    )
    assert is_true(js, "Completed")
    assert (js["status"].get("restarts") or 0) == 0
    kenv.wait_workload("excl", lambda w: is_true(w, "Finished"), "finished")
