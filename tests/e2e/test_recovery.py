"""Recovery on the full local cluster: a restart on the first sign of failure, a completion on
the first sign of success, a pod stuck on a dead node that no longer blocks the next attempt, and
each restart's timeline in the metrics and Events (docs/behaviour.md#early-job-conditions,
#pods-on-unreachable-nodes, #restart-timeline).

The real Job controller writes FailureTarget / SuccessCriteriaMet, deletes the rest of a decided
Job's pods and adds Failed / Complete once they are gone; kwok holds each deleted pod for its
grace period (`honor-grace`), as a container that ends only at SIGKILL does. The order of events
is read from the API's own timestamps, not from how fast anything ran: a restart written on
FailureTarget is older than the end of the grace period of the failed Job's other pod, which the
terminal Failed condition waits for.

The cluster and the controller are this module's own: the controller runs with
`earlyJobConditions` on (the session's runs with the defaults).
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from jobset_controller_dev.envtest.controller import ControllerProcess, local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster, condition_true
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    HONOR_GRACE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port, processes_mentioning

pytestmark = pytest.mark.e2e

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOB_NAME = "batch.kubernetes.io/job-name"
GRACE = 8  # seconds a deleted pod keeps running: the margin every ordering below rests on
HOLD = {RUN_FOREVER_ANNOTATION: "true", HONOR_GRACE_ANNOTATION: "true"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[FullCluster]:
    cluster = FullCluster().start()
    marker = str(cluster.workdir)
    try:
        yield cluster
    finally:
        cluster.stop()
        assert processes_mentioning(marker) == []


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def controller(cluster: FullCluster, metrics_port: int) -> Iterator[ControllerProcess]:
    args = (
        "--leader-elect=false",
        "--metrics-secure=false",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
    )
    sections = {"earlyJobConditions": {"enable": True}}
    with local_controller(cluster, stem="recovery", sections=sections, args=args) as process:
        yield process


@pytest.fixture
def namespace(cluster: FullCluster, controller: ControllerProcess) -> Iterator[str]:
    name = cluster.create_namespace(f"recovery-{os.urandom(4).hex()}")
    try:
        yield name
    finally:
        cluster.delete_namespace(name)


def held_workers(name: str, *, replicas: int, pods: int, **template: Any) -> dict[str, Any]:
    rjob = replicated_job(name, replicas, pods=pods, backoff_limit=0, annotations=HOLD)
    rjob["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = GRACE
    rjob["template"]["spec"].update(template)
    return rjob


def create(cluster: FullCluster, namespace: str, body: dict[str, Any]) -> None:
    status, reply = cluster.request(
        "POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets", body
    )
    assert status == 201, reply


def jobset_path(namespace: str, name: str) -> str:
    return f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"


def pods_path(namespace: str, selector: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"


def running(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") == "Running" and condition_true(pod, "Ready")


def wait_running(cluster: FullCluster, namespace: str, selector: str, count: int) -> list[Any]:
    body = cluster.wait_for(
        pods_path(namespace, selector),
        lambda b: len(items := b.get("items") or ()) == count and all(map(running, items)),
        timeout=90,
        what=f"{count} pods Running ({selector})",
    )
    items: list[Any] = body["items"]
    return items


def patch_pod(cluster: FullCluster, namespace: str, name: str, annotations: dict[str, str]) -> None:
    status, reply = cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {"metadata": {"annotations": annotations}},
        "application/merge-patch+json",
    )
    assert status == 200, reply


def fail(cluster: FullCluster, namespace: str, pod: dict[str, Any]) -> None:
    """The pod's container exits 3 (kwok's fail stage, after a short run)."""
    patch_pod(
        cluster,
        namespace,
        pod["metadata"]["name"],
        {RUN_FOREVER_ANNOTATION: "false", FAIL_EXIT_CODE_ANNOTATION: "3"},
    )


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for found in (obj.get("status") or {}).get("conditions") or ():
        if found["type"] == kind:
            return dict(found)
    raise AssertionError(f"no {kind} condition in {obj.get('status')}")


def deletion_of(cluster: FullCluster, namespace: str, pod_name: str) -> str:
    """The deletionTimestamp (end of the grace period) the pod gets once the Job controller
    deletes it, read before kwok ends the pod."""
    pod = cluster.wait_for(
        f"/api/v1/namespaces/{namespace}/pods/{pod_name}",
        lambda p: bool(p and p["metadata"].get("deletionTimestamp")),
        timeout=60,
        what=f"{pod_name} deleted",
    )
    return str(pod["metadata"]["deletionTimestamp"])


def events(cluster: FullCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list_items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        if e.get("reason") == reason
    ]


def scrape(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=scaled(10)) as response:
        return str(response.read().decode())


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition ``text`` (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        metric, _, label_text = series.partition("{")
        got = ",".join(sorted(label_text.rstrip("}").split(","))) if label_text else ""
        if metric == name and got == want:
            return float(value)
    return 0.0


def test_a_restart_on_failure_target_does_not_wait_for_the_failed_jobs_other_pods(
    cluster: FullCluster, namespace: str, metrics_port: int
) -> None:
    create(
        cluster,
        namespace,
        jobset_manifest(
            "fast",
            replicated_jobs=[held_workers("w", replicas=2, pods=2)],
            failurePolicy={"maxRestarts": 2},
        ),
    )
    pods = wait_running(cluster, namespace, f"{JOBSET_NAME}%3Dfast", 4)
    victim = next(p for p in pods if p["metadata"]["labels"][JOB_NAME] == "fast-w-0")
    sibling = next(
        p
        for p in pods
        if p["metadata"]["labels"][JOB_NAME] == "fast-w-0"
        and p["metadata"]["name"] != victim["metadata"]["name"]
    )
    fail(cluster, namespace, victim)

    sibling_ends = deletion_of(cluster, namespace, sibling["metadata"]["name"])
    js = cluster.wait_for(
        jobset_path(namespace, "fast"),
        lambda j: (j.get("status") or {}).get("restarts") == 1,
        timeout=60,
        what="the JobSet restarted",
    )
    restarting = condition(js, "RestartingJobSet")
    # Written while the failed Job's other pod still ran out its grace period, which the Job's
    # Failed condition waits for: the restart came from FailureTarget.
    assert restarting["lastTransitionTime"] < sibling_ends, (restarting, sibling_ends)
    upstream = "applying RestartJobSet failure policy action (first failed job: fast-w-0)"
    assert restarting["message"].startswith(upstream)
    detail = restarting["message"][len(upstream) :]
    named = (
        f": BackoffLimitExceeded, pod {victim['metadata']['name']} on node "
        f"{victim['spec']['nodeName']}, container main exited with code 3 (Error)"
    )
    # The pod cache may see the pod's end after the Job's condition: then upstream's words alone.
    assert detail in ("", named)

    wait_running(cluster, namespace, f"{JOBSET_NAME}%3Dfast%2C{ATTEMPT}%3D1", 4)
    done = cluster.wait_for(
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        lambda body: any(e.get("reason") == "RestartCompleted" for e in body.get("items") or ()),
        timeout=60,
        what="RestartCompleted event",
    )
    (event,) = [e for e in done["items"] if e.get("reason") == "RestartCompleted"]
    assert event["regarding"]["name"] == "fast"
    assert event["note"].startswith(
        "restart 1 (RestartJobSet after fast-w-0 failed (BackoffLimitExceeded)) completed in "
    )
    text = scrape(metrics_port)
    restarts = sample(
        text, "jobset_restarts_total", action="RestartJobSet", reason="BackoffLimitExceeded"
    )
    assert restarts >= 1
    for phase in ("detect", "teardown", "create", "ready"):
        assert sample(text, "jobset_restart_phase_duration_seconds_count", phase=phase) >= 1
    in_progress = [
        line
        for line in text.splitlines()
        if line.startswith("jobset_restart_started_timestamp_seconds{")
        and f'namespace="{namespace}"' in line
    ]
    assert in_progress == [], "the restart is over: no gauge left"


def test_success_criteria_met_completes_the_jobset_before_the_jobs_other_pods_end(
    cluster: FullCluster, namespace: str
) -> None:
    """A Job success policy (index 0 done is enough): the Job controller writes
    SuccessCriteriaMet, deletes index 1 and adds Complete once it is gone."""
    rjob = held_workers(
        "w",
        replicas=1,
        pods=2,
        completionMode="Indexed",
        successPolicy={"rules": [{"succeededIndexes": "0"}]},
    )
    create(cluster, namespace, jobset_manifest("done", replicated_jobs=[rjob]))
    pods = wait_running(cluster, namespace, f"{JOBSET_NAME}%3Ddone", 2)
    index = "batch.kubernetes.io/job-completion-index"
    first = next(p for p in pods if p["metadata"]["annotations"][index] == "0")
    other = next(p for p in pods if p["metadata"]["annotations"][index] == "1")
    patch_pod(
        cluster,
        namespace,
        first["metadata"]["name"],
        {RUN_FOREVER_ANNOTATION: "false", RUN_DURATION_ANNOTATION: "1s"},
    )
    other_ends = deletion_of(cluster, namespace, other["metadata"]["name"])
    js = cluster.wait_for(
        jobset_path(namespace, "done"),
        lambda j: (j.get("status") or {}).get("terminalState") == "Completed",
        timeout=60,
        what="the JobSet completed",
    )
    assert condition(js, "Completed")["lastTransitionTime"] < other_ends


def test_a_pod_stuck_on_a_dead_node_is_force_deleted_and_the_next_attempt_runs(
    cluster: FullCluster, namespace: str
) -> None:
    """One pod's node dies (kubelet gone: the node lifecycle controller taints it unreachable),
    another pod fails: the restart deletes every Job, the pod on the dead node never ends by
    itself, and the controller force-deletes it once it is terminating past twice its grace
    period. Runs last in the module: the node stays dead."""
    rjob = held_workers("w", replicas=2, pods=1)
    # One pod per node, so that one node's death strands exactly one of them.
    rjob["template"]["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {JOBSET_NAME: "stranded"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    create(
        cluster,
        namespace,
        jobset_manifest("stranded", replicated_jobs=[rjob], failurePolicy={"maxRestarts": 2}),
    )
    pods = wait_running(cluster, namespace, f"{JOBSET_NAME}%3Dstranded", 2)
    doomed, victim = sorted(pods, key=lambda p: p["metadata"]["labels"][JOB_NAME])
    node = doomed["spec"]["nodeName"]
    assert victim["spec"]["nodeName"] != node
    # Pods of earlier tests' namespaces, still being removed, may be on the node too.
    assert f"{namespace}/{doomed['metadata']['name']}" in cluster.freeze_node(node)
    cluster.wait_for(
        f"/api/v1/nodes/{node}",
        lambda n: (
            "node.kubernetes.io/unreachable" in {t["key"] for t in n["spec"].get("taints") or ()}
        ),
        timeout=60,
        what="unreachable taint",
    )
    fail(cluster, namespace, victim)

    wait_running(cluster, namespace, f"{JOBSET_NAME}%3Dstranded%2C{ATTEMPT}%3D1", 2)
    cluster.wait_for(
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        lambda body: any(
            e.get("reason") == "PodForceDeletedOnUnreachableNode" for e in body.get("items") or ()
        ),
        timeout=30,
        what="PodForceDeletedOnUnreachableNode event",
    )
    (forced,) = events(cluster, namespace, "PodForceDeletedOnUnreachableNode")
    assert (forced["type"], forced["regarding"]["name"]) == ("Warning", "stranded")
    assert forced["note"].startswith(f"pod {doomed['metadata']['name']} was terminating since ")
    assert f"on node {node}, which is tainted node.kubernetes.io/unreachable" in forced["note"]
    status, gone = cluster.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods/{doomed['metadata']['name']}"
    )
    assert status == 404, gone
