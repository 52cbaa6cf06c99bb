"""The full local cluster behaves like a cluster: real Job controller, scheduler, GC, EndpointSlice
controller, with kwok playing the kubelet of simulated nodes (stages in envtest/kwok_stages.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jobset_controller_dev.envtest.fullcluster import FullCluster, condition_true
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    HONOR_GRACE_ANNOTATION,
    KILLED_EXIT_CODE,
    READY_AFTER_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.nodes import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    NODE_POOL_LABEL,
    RACK_LABEL,
    ZONE_LABEL,
    NodeSpec,
)
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import processes_mentioning

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def job(
    name: str,
    *,
    completions: int = 1,
    parallelism: int | None = None,
    indexed: bool = False,
    backoff_limit: int = 6,
    restart_policy: str = "Never",
    annotations: dict[str, str] | None = None,
    subdomain: str | None = None,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": [{"name": "main", "image": "example.com/worker:1"}],
    }
    if subdomain:
        pod_spec["subdomain"] = subdomain
    spec: dict[str, Any] = {
        "completions": completions,
        "parallelism": parallelism or completions,
        "backoffLimit": backoff_limit,
        "template": {"metadata": {"annotations": annotations or {}}, "spec": pod_spec},
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def create(cluster: FullCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created = cluster.request("POST", path, body)
    assert status == 201, created
    return created


def jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def pods(cluster: FullCluster, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return cluster.list_items(
        f"/api/v1/namespaces/{namespace}/pods", label_selector=f"{JOB_NAME_LABEL}={job_name}"
    )


def running_and_ready(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") == "Running" and condition_true(pod, "Ready")


def wait_pods(
    cluster: FullCluster, namespace: str, job_name: str, count: int, predicate: Any
) -> list[dict[str, Any]]:
    selector = f"{JOB_NAME_LABEL}%3D{job_name}"
    body = cluster.wait_for(
        f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}",
        lambda b: len(b.get("items") or []) == count and all(predicate(p) for p in b["items"]),
        what=f"{count} pods of job {job_name}",
    )
    items: list[dict[str, Any]] = body["items"]
    return items


def test_default_nodes_have_topology_capacity_and_are_schedulable(
    full_cluster: FullCluster,
) -> None:
    nodes = full_cluster.list_items("/api/v1/nodes", label_selector="type=kwok")
    assert len(nodes) == 8
    racks: dict[str, set[str]] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        assert labels[HOSTNAME_LABEL] == node["metadata"]["name"]
        assert labels[NODE_POOL_LABEL] == labels[RACK_LABEL].replace("rack-", "pool-")
        racks.setdefault(labels[RACK_LABEL], set()).add(labels[ZONE_LABEL])
        assert condition_true(node, "Ready")
        assert not node["spec"].get("taints")
        assert node["status"]["allocatable"][GPU_RESOURCE] == "4"
    assert sorted(racks) == ["rack-0", "rack-1", "rack-2", "rack-3"]
    assert all(len(zones) == 1 for zones in racks.values())
    assert {z for zones in racks.values() for z in zones} == {"zone-a", "zone-b"}


def test_indexed_job_completes_through_scheduler_and_kwok(
    full_cluster: FullCluster, namespace: str
) -> None:
    create(full_cluster, jobs_path(namespace), job("indexed", completions=3, indexed=True))

    finished = full_cluster.wait_for(
        f"{jobs_path(namespace)}/indexed", lambda j: condition_true(j, "Complete")
    )

    assert finished["status"]["succeeded"] == 3
    assert finished["status"]["completedIndexes"] == "0-2"
    done = pods(full_cluster, namespace, "indexed")
    assert len(done) == 3
    assert {p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in done} == {
        "0",
        "1",
        "2",
    }
    for pod in done:
        assert pod["spec"]["nodeName"] in full_cluster.nodes
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["status"]["podIP"].startswith("10.244.")
        (container,) = pod["status"]["containerStatuses"]
        assert container["state"]["terminated"]["exitCode"] == 0


def test_annotated_failure_fails_job_with_backoff_limit_exceeded(
    full_cluster: FullCluster, namespace: str
) -> None:
    annotations = {FAIL_EXIT_CODE_ANNOTATION: "3", RUN_DURATION_ANNOTATION: "300ms"}
    create(
        full_cluster,
        jobs_path(namespace),
        job("failing", backoff_limit=0, annotations=annotations),
    )

    failed = full_cluster.wait_for(
        f"{jobs_path(namespace)}/failing", lambda j: condition_true(j, "Failed")
    )

    condition = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert condition["reason"] == "BackoffLimitExceeded"
    (pod,) = pods(full_cluster, namespace, "failing")
    assert pod["status"]["phase"] == "Failed"
    (container,) = pod["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 3


def test_failing_container_with_restart_policy_on_failure_restarts_until_backoff_limit(
    full_cluster: FullCluster, namespace: str
) -> None:
    annotations = {FAIL_EXIT_CODE_ANNOTATION: "5", RUN_DURATION_ANNOTATION: "200ms"}
    create(
        full_cluster,
        jobs_path(namespace),
        job("crashing", backoff_limit=2, restart_policy="OnFailure", annotations=annotations),
    )

    failed = full_cluster.wait_for(
        f"{jobs_path(namespace)}/crashing", lambda j: condition_true(j, "Failed")
    )

    condition = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert condition["reason"] == "BackoffLimitExceeded"


def test_run_forever_pod_stays_running_and_ready(full_cluster: FullCluster, namespace: str) -> None:
    create(
        full_cluster,
        jobs_path(namespace),
        job("server", annotations={RUN_FOREVER_ANNOTATION: "true"}),
    )
    (started,) = wait_pods(full_cluster, namespace, "server", 1, running_and_ready)

    # A witness: an ordinary pod started after the server's runs its course and ends, so kwok
    # has had the time and the turn to end the server's pod too, had it been an ordinary one.
    create(full_cluster, jobs_path(namespace), job("witness"))
    full_cluster.wait_for(
        f"{jobs_path(namespace)}/witness", lambda j: condition_true(j, "Complete")
    )

    (pod,) = pods(full_cluster, namespace, "server")
    assert running_and_ready(pod)
    assert pod["metadata"]["uid"] == started["metadata"]["uid"]
    assert pod["status"]["podIP"].startswith("10.244.")
    assert pod["status"]["hostIP"].startswith("10.1.0.")
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] is True
    assert "running" in container["state"]
    _, body = full_cluster.request("GET", f"{jobs_path(namespace)}/server")
    assert body["status"].get("active") == 1
    assert body["status"].get("ready") == 1


def test_ready_after_keeps_a_running_pod_unready_for_a_while(
    full_cluster: FullCluster, namespace: str
) -> None:
    """What an InOrder-startup test needs: a leader pod that runs but is not Ready yet, so its
    Job's status.ready stays 0 until the delay has passed."""
    annotations = {READY_AFTER_ANNOTATION: "5s", RUN_FOREVER_ANNOTATION: "true"}
    create(full_cluster, jobs_path(namespace), job("leader", annotations=annotations))

    (pod,) = wait_pods(
        full_cluster, namespace, "leader", 1, lambda p: p["status"].get("phase") == "Running"
    )
    assert not condition_true(pod, "Ready")
    _, leader = full_cluster.request("GET", f"{jobs_path(namespace)}/leader")
    assert not leader["status"].get("ready")

    full_cluster.wait_for(
        f"{jobs_path(namespace)}/leader", lambda j: j["status"].get("ready") == 1, timeout=20
    )


def test_readiness_gate_holds_ready_until_its_condition_is_true(
    full_cluster: FullCluster, namespace: str
) -> None:
    pod_path = f"/api/v1/namespaces/{namespace}/pods/gated"
    create(
        full_cluster,
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gated"},
            "spec": {
                "readinessGates": [{"conditionType": "example.com/gate"}],
                "containers": [{"name": "main", "image": "example.com/server:1"}],
            },
        },
    )
    waiting = full_cluster.wait_for(pod_path, lambda p: condition_true(p, "ContainersReady"))
    assert not condition_true(waiting, "Ready")

    status, body = full_cluster.request(
        "PATCH",
        f"{pod_path}/status",
        {"status": {"conditions": [{"type": "example.com/gate", "status": "True"}]}},
        "application/strategic-merge-patch+json",
    )
    assert status == 200, body

    full_cluster.wait_for(pod_path, lambda p: condition_true(p, "Ready"), timeout=10)


def test_foreground_deletion_removes_job_and_its_pods(
    full_cluster: FullCluster, namespace: str
) -> None:
    create(
        full_cluster,
        jobs_path(namespace),
        job("doomed", completions=2, annotations={RUN_FOREVER_ANNOTATION: "true"}),
    )
    wait_pods(full_cluster, namespace, "doomed", 2, running_and_ready)

    status, body = full_cluster.request(
        "DELETE",
        f"{jobs_path(namespace)}/doomed",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
    )
    assert status in (200, 202), body

    full_cluster.wait_for(f"{jobs_path(namespace)}/doomed", lambda j: not j, what="job gone")
    wait_pods(full_cluster, namespace, "doomed", 0, lambda p: True)


def test_deleted_pod_is_killed_then_removed(full_cluster: FullCluster, namespace: str) -> None:
    """Like a kubelet, kwok first ends a deleted pod (Failed, exit 137), then removes it once no
    finalizer holds it (here a test finalizer; for Job pods the Job controller's)."""
    pod_path = f"/api/v1/namespaces/{namespace}/pods/held"
    create(
        full_cluster,
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "held",
                "finalizers": ["example.com/hold"],
                "annotations": {RUN_FOREVER_ANNOTATION: "true"},
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "example.com/worker:1"}],
            },
        },
    )
    full_cluster.wait_for(pod_path, running_and_ready)
    status, body = full_cluster.request("DELETE", pod_path)
    assert status == 200, body

    killed = full_cluster.wait_for(pod_path, lambda p: p["status"].get("phase") == "Failed")
    (container,) = killed["status"]["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == KILLED_EXIT_CODE

    status, body = full_cluster.request(
        "PATCH", pod_path, {"metadata": {"finalizers": None}}, "application/merge-patch+json"
    )
    assert status == 200, body
    full_cluster.wait_for(pod_path, lambda p: not p, timeout=10, what="pod gone")


def _plain_pod(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "example.com/worker:1"}],
            **spec,
        },
    }


def test_a_pod_honoring_its_grace_period_runs_until_its_deletion_timestamp(
    full_cluster: FullCluster, namespace: str
) -> None:
    """`honor-grace`: a deleted pod keeps running through its grace period (a container that only
    stops at SIGKILL), then ends with 137 and is removed."""
    pod_path = f"/api/v1/namespaces/{namespace}/pods/graceful"
    annotations = {RUN_FOREVER_ANNOTATION: "true", HONOR_GRACE_ANNOTATION: "true"}
    create(
        full_cluster,
        f"/api/v1/namespaces/{namespace}/pods",
        _plain_pod("graceful", annotations, terminationGracePeriodSeconds=3),
    )
    full_cluster.wait_for(pod_path, running_and_ready)
    status, deleted = full_cluster.request("DELETE", pod_path)
    assert status == 200, deleted
    deadline = deleted["metadata"]["deletionTimestamp"]
    assert deleted["status"]["phase"] == "Running"

    ended: list[dict[str, Any]] = []

    def ended_or_gone(pod: dict[str, Any]) -> bool:
        if pod and pod["status"].get("phase") == "Failed":
            ended.append(pod)
        return not pod

    full_cluster.wait_for(pod_path, ended_or_gone, timeout=30, what="pod ended and removed")
    # kwok's status patch is the last word before removal; when the poll saw it, the container
    # ended at the deletion timestamp or after (second precision on both).
    for pod in ended:
        (container,) = pod["status"]["containerStatuses"]
        assert container["state"]["terminated"]["exitCode"] == KILLED_EXIT_CODE
        assert container["state"]["terminated"]["finishedAt"] >= deadline


def test_a_frozen_node_turns_unreachable_and_its_deleted_pods_stay_terminating(
    full_cluster: FullCluster, namespace: str
) -> None:
    """`freeze_node` stands for a dead kubelet: the node lifecycle controller taints the node
    unreachable, and a deleted pod on it ends only when it is force-deleted."""
    (node,) = full_cluster.add_nodes([NodeSpec(name="doomed-node", gpus=0)])
    pod_path = f"/api/v1/namespaces/{namespace}/pods/stranded"
    try:
        create(
            full_cluster,
            f"/api/v1/namespaces/{namespace}/pods",
            _plain_pod("stranded", {RUN_FOREVER_ANNOTATION: "true"}, nodeName=node),
        )
        full_cluster.wait_for(pod_path, running_and_ready)
        assert full_cluster.freeze_node(node) == [f"{namespace}/stranded"]
        status, body = full_cluster.request("DELETE", pod_path)
        assert status == 200, body

        tainted = full_cluster.wait_for(
            f"/api/v1/nodes/{node}",
            lambda n: (
                "node.kubernetes.io/unreachable"
                in {t["key"] for t in n["spec"].get("taints") or ()}
            ),
            timeout=60,
            what="unreachable taint",
        )
        assert not condition_true(tainted, "Ready")
        # The pod was deleted before the taint came; kwok never ended it.
        status, pod = full_cluster.request("GET", pod_path)
        assert status == 200, pod
        assert pod["metadata"]["deletionTimestamp"]
        assert pod["status"]["phase"] == "Running"

        status, body = full_cluster.request(
            "DELETE",
            pod_path,
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
        assert status == 200, body
        full_cluster.wait_for(pod_path, lambda p: not p, timeout=10, what="pod gone")
    finally:
        full_cluster.delete_nodes([node])


def test_headless_service_endpoint_slices_list_pods_with_hostnames(
    full_cluster: FullCluster, namespace: str
) -> None:
    create(
        full_cluster,
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "workers"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {JOB_NAME_LABEL: "workers"},
            },
        },
    )
    create(
        full_cluster,
        jobs_path(namespace),
        job(
            "workers",
            completions=2,
            indexed=True,
            subdomain="workers",
            annotations={RUN_FOREVER_ANNOTATION: "true"},
        ),
    )
    running = wait_pods(full_cluster, namespace, "workers", 2, running_and_ready)
    expected = {p["spec"]["hostname"]: p["status"]["podIP"] for p in running}
    assert set(expected) == {"workers-0", "workers-1"}

    def endpoints(body: dict[str, Any]) -> dict[str, str]:
        return {
            e.get("hostname", ""): e["addresses"][0]
            for s in body.get("items") or []
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
        }

    slices = full_cluster.wait_for(
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        "?labelSelector=kubernetes.io%2Fservice-name%3Dworkers",
        lambda b: endpoints(b) == expected,
        what="EndpointSlices of service workers",
    )
    node_names = {e["nodeName"] for s in slices["items"] for e in s["endpoints"]}
    assert node_names <= set(full_cluster.nodes)


def test_added_nodes_can_be_labelled_and_tainted(full_cluster: FullCluster) -> None:
    (name,) = full_cluster.add_nodes(
        [
            NodeSpec(
                name="extra-tainted",
                labels={"pool": "extra"},
                taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
                gpus=0,
            )
        ]
    )
    try:
        full_cluster.label_nodes([name], {"alpha.jobset.sigs.k8s.io/namespaced-job": "ns_job"})
        _, node = full_cluster.request("GET", f"/api/v1/nodes/{name}")
        assert node["metadata"]["labels"]["pool"] == "extra"
        assert node["metadata"]["labels"]["alpha.jobset.sigs.k8s.io/namespaced-job"] == "ns_job"
        assert [t["key"] for t in node["spec"]["taints"]] == ["dedicated"]
        assert GPU_RESOURCE not in node["status"]["allocatable"]
    finally:
        full_cluster.delete_nodes([name])
    assert name not in full_cluster.nodes


def test_stopping_a_full_cluster_leaves_no_process_behind() -> None:
    cluster = FullCluster(nodes=[NodeSpec(name="solo")], crd_paths=[]).start()
    workdir = cluster.workdir
    try:
        running = cluster.component_processes()
        assert [p.name for p in running] == [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ]
        assert all(p.running() for p in running)
        assert len(processes_mentioning(str(workdir))) >= 5
    finally:
        cluster.stop()
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()


def test_full_command_children_die_with_a_killed_parent() -> None:
    """`python -m jobset_controller_dev.envtest --full` killed by SIGKILL (no cleanup code runs):
    the kernel's parent-death signal still takes every component down with it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobset_controller_dev.envtest", "--full"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    workdir: Path | None = None
    try:
        line = proc.stdout.readline()  # blocks until the cluster is ready
        assert line.startswith("export KUBECONFIG="), line
        workdir = Path(line.strip().removeprefix("export KUBECONFIG=")).parent
        marker = str(workdir)
        assert len(processes_mentioning(marker)) >= 5
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + scaled(15)
        while processes_mentioning(marker) and time.monotonic() < deadline:
            time.sleep(0.2)  # poll interval of the wait for the processes to exit
        assert processes_mentioning(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
