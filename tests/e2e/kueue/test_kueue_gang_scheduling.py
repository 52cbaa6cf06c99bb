"""A Kueue-admitted JobSet with `spec.scheduling` (KEP-969), on Kubernetes >= 1.37 serving
scheduling.k8s.io/v1beta1 with the real kube-scheduler's GangScheduling plugin.

Kueue and gang scheduling meet on the same JobSet: Kueue suspends it at creation, admits it and
resumes it (writing its flavor's node selectors into the templates); only then may our controller
create the Workload and PodGroups (none while suspended) and the scheduler bind the gang.

Why a cluster of its own (not the package's `kueue_cluster`): that one runs without the Workload
API and our controller without the JobSetWorkloadAwareSchedulingAPI gate, as most clusters do.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from jobset_controller_dev.envtest.controller import ControllerProcess, start_local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kueue import Kueue
from jobset_controller_dev.envtest.kueue_objects import (
    KueueNamespace,
    condition,
    is_true,
    jobset,
    rjob,
)
from jobset_controller_dev.envtest.kwok_stages import RUN_FOREVER_ANNOTATION
from jobset_controller_dev.envtest.processes import processes_mentioning

pytestmark = pytest.mark.kueue

SCHEDULING = "/apis/scheduling.k8s.io/v1beta1"
GATE = "JobSetWorkloadAwareSchedulingAPI"


@pytest.fixture(scope="module")
def gang_cluster() -> Iterator[FullCluster]:
    full = FullCluster(workload_api=True)
    full.start()
    marker = str(full.workdir)
    try:
        yield full
    finally:
        full.stop()
        assert processes_mentioning(marker) == []


@pytest.fixture(scope="module")
def gang_controller(gang_cluster: FullCluster) -> Iterator[ControllerProcess]:
    process = start_local_controller(
        workdir=gang_cluster.workdir,
        ca=gang_cluster.ca,
        kubeconfig=gang_cluster.kubeconfig,
        stem="kueue-gang",
        sections={"featureGates": {GATE: True}},
    )
    try:
        yield process
    finally:
        assert process.stop(60) == 0, process.tail()


@pytest.fixture(scope="module")
def gang_kueue(gang_cluster: FullCluster) -> Iterator[Kueue]:
    instance = Kueue(gang_cluster).start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def gang_env(
    gang_cluster: FullCluster, gang_controller: ControllerProcess, gang_kueue: Kueue
) -> Iterator[KueueNamespace]:
    ns = gang_cluster.create_namespace(f"kueue-gang-{uuid.uuid4().hex[:8]}")
    env = KueueNamespace(gang_cluster, ns)
    try:
        yield env
    finally:
        env.cleanup()


def scheduling_objects(cluster: FullCluster, ns: str, plural: str) -> list[dict[str, Any]]:
    return cluster.list_items(f"{SCHEDULING}/namespaces/{ns}/{plural}")


def test_a_kueue_admitted_jobset_gets_its_workload_and_pod_groups_and_binds_as_a_gang(
    gang_env: KueueNamespace,
) -> None:
    env, cluster = gang_env, gang_env.cluster
    flavor = env.flavor("any", {})
    env.local_queue("lq", env.cluster_queue("cq", [(flavor, "8")]))
    forever = {RUN_FOREVER_ANNOTATION: "true"}
    body = jobset(
        "gang",
        rjob("leader", annotations=forever),
        rjob("workers", replicas=2, pods=2, annotations=forever),
        scheduling={"schedulingPolicy": {"gang": {}}},
    )
    created = env.create_jobset(body)
    assert created["spec"]["suspend"] is True, "Kueue's webhook suspends a queued JobSet"
    assert created["spec"].get("scheduling") == {"schedulingPolicy": {"gang": {}}}, (
        "Kueue's webhook kept spec.scheduling"
    )
    # Nothing reserves capacity for a JobSet Kueue has not admitted.
    assert scheduling_objects(cluster, env.ns, "workloads") == []

    admitted = env.wait_workload("gang", lambda w: is_true(w, "Admitted"), "admitted")
    js = env.wait_jobset("gang", lambda j: j["spec"].get("suspend") is False, "resumed")
    assert js["spec"].get("scheduling") == {"schedulingPolicy": {"gang": {}}}, (
        "spec.scheduling survived Kueue's resume"
    )
    pods = env.wait_pods(
        "gang",
        lambda ps: len(ps) == 5 and all(p["spec"].get("nodeName") for p in ps),
        "the whole gang bound",
    )
    (workload,) = scheduling_objects(cluster, env.ns, "workloads")
    (group,) = scheduling_objects(cluster, env.ns, "podgroups")
    # 1.37.2 writes `schedulingConstraints: null` into every template (no omitempty).
    templates = [
        {key: value for key, value in template.items() if value is not None}
        for template in workload["spec"]["podGroupTemplates"]
    ]
    assert templates == [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 5}}}]
    # Created only once Kueue had admitted the JobSet (none while it was suspended).
    admitted_at = condition(admitted, "Admitted")
    assert admitted_at is not None
    assert workload["metadata"]["creationTimestamp"] >= admitted_at["lastTransitionTime"]
    assert group["metadata"]["name"] == workload["metadata"]["name"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {
        group["metadata"]["name"]
    }
    cluster.wait_for(
        f"{SCHEDULING}/namespaces/{env.ns}/podgroups/{group['metadata']['name']}",
        lambda pg: is_true(pg, "PodGroupInitiallyScheduled"),
        timeout=60,
        what="the scheduler reports the PodGroup scheduled",
    )
