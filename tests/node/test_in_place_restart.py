"""In-place restart on the real node (issue 25): the controller with the InPlaceRestart gate (a
process of its own against the node's control plane) and JobSets whose pods run the agent from
the controller's image as a native sidecar (upstream's example: `restartPolicyRules`
RestartAllContainers on a non-zero exit, the worker behind the agent's startup probe). Kubernetes
1.36 and later have ContainerRestartRules and RestartAllContainersOnContainerExits on (beta) by
default.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.test_in_place_restart_agent import collection

from jobset_controller_dev.envtest.controller import ControllerProcess, local_controller
from jobset_controller_dev.envtest.in_place_restart_fixtures import (
    IN_PLACE_RESTART_GATE,
    INDEX_FIELD,
    JOBSETS,
    PY,
    agent_sidecar,
    restart_all_on_failure,
)
from jobset_controller_dev.envtest.polling import poll
from jobset_controller_dev.envtest.realnode import RealNode

pytestmark = pytest.mark.node

ROOT = Path(__file__).resolve().parents[2]
SELECTOR = "labelSelector=jobset.sigs.k8s.io/jobset-name=ipr"

# FAIL=once: job index 0 fails once with exit 3, retriable (a marker in its pod's emptyDir says
# it did); FAIL=always: every time; FAIL=fatal: index 0 exits 4, which no restart rule retries.
# Every other worker works (WORK_SECONDS, then succeeds) only once its pod runs at in-place
# restart attempt WORK_AT_ATTEMPT or later, and waits until then: the restart that brings that
# attempt replaces it. Why: a worker that worked from the start finished (its pod Succeeded, so
# it can never restart in place) before a loaded machine had carried index 0's failure to the
# other pods, and attempt 1 was never reached (seen at load 8+: "every pod restarted in place
# into attempt 1: not within 180 s", pods Succeeded at attempt 0). The attempt is the agent's
# annotation on the pod, read from a downward API file (refreshed by the kubelet) and, at the
# container's start, from an environment variable.
WORKER = """
import os, sys, time
index = os.environ["JOB_INDEX"]
marker = "/data/failed-once"
fail = os.environ.get("FAIL")
if index == "0" and fail == "fatal":
    sys.exit(4)
if index == "0" and fail in ("once", "always") and (fail == "always" or not os.path.exists(marker)):
    open(marker, "w").close()
    print("failing", flush=True)
    time.sleep(1)
    sys.exit(3)

def attempt():
    values = [os.environ.get("ATTEMPT", "")]
    try:
        values.append(open("/podinfo/attempt").read())
    except OSError:
        pass
    return max((int(v) for v in values if v.strip().isdigit()), default=0)

wanted = int(os.environ["WORK_AT_ATTEMPT"])
print("waiting for attempt", wanted, flush=True)
while attempt() < wanted:
    time.sleep(0.5)
print("working", flush=True)
time.sleep(float(os.environ.get("WORK_SECONDS", "4")))
"""
ATTEMPT_FIELD = "metadata.annotations['jobset.sigs.k8s.io/in-place-restart-attempt']"


def state(node: RealNode, namespace: str, controller: ControllerProcess) -> str:
    """The JobSet's status, each pod's phase, annotations and container states, and the tail of
    the controller's log: what a failed wait needs to be understood afterwards."""
    lines = [f"jobset status: {(jobset(node, namespace).get('status') or {})}"]
    for pod in pods(node, namespace):
        status = pod.get("status") or {}
        containers = (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        )
        lines.append(
            f"pod {pod['metadata']['name']}: phase={status.get('phase')} "
            f"annotations={pod['metadata'].get('annotations')} "
            f"containers={[(c['name'], c.get('restartCount'), c.get('state')) for c in containers]}"
        )
    lines.append(f"controller log tail:\n{controller.tail(4000)}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def gated_controller(node: RealNode) -> Iterator[ControllerProcess]:
    with local_controller(node.cluster, stem="in-place", sections=IN_PLACE_RESTART_GATE) as process:
        yield process


@pytest.fixture
def namespace(node: RealNode) -> Iterator[str]:
    """A namespace with the agent's example ServiceAccount, Role and RoleBinding."""
    name = f"ipr-{uuid.uuid4().hex[:6]}"
    node.cluster.create_namespace(name)
    rbac = yaml.safe_load_all((ROOT / "manifests/in-place-restart-agent/rbac.yaml").read_text())
    for document in rbac:
        path = collection(document["kind"], name)
        for subject in document.get("subjects", ()):
            subject["namespace"] = name
        status, body = node.cluster.request("POST", path, document)
        assert status == 201 or (status == 409 and "/namespaces/" not in path), body
    try:
        yield name
    finally:
        node.cluster.delete_namespace(name)


def restart_rule(retriable: list[int] | None = None) -> list[dict[str, Any]]:
    """Restart all containers on a non-zero exit, or only on the `retriable` codes."""
    if retriable is None:
        return restart_all_on_failure()
    return [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": retriable}}
    ]


def in_place_jobset(
    image: str,
    *,
    replicas: int = 2,
    max_restarts: int = 3,
    fail: str = "once",
    work_seconds: float = 4,
    work_at_attempt: int = 1,
    retriable: list[int] | None = None,
) -> dict[str, Any]:
    worker = {
        "name": "worker",
        "image": image,
        "imagePullPolicy": "Never",
        "command": [PY, "-c", WORKER],
        "restartPolicy": "Never",
        "restartPolicyRules": restart_rule(retriable),
        "env": [
            {"name": "JOB_INDEX", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
            {"name": "FAIL", "value": fail},
            {"name": "WORK_SECONDS", "value": str(work_seconds)},
            {"name": "WORK_AT_ATTEMPT", "value": str(work_at_attempt)},
            {"name": "ATTEMPT", "valueFrom": {"fieldRef": {"fieldPath": ATTEMPT_FIELD}}},
        ],
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "podinfo", "mountPath": "/podinfo", "readOnly": True},
        ],
    }  # fmt: skip
    job = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 2**31 - 1,
        "podReplacementPolicy": "Failed",
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": "in-place-restart-agent",
                "terminationGracePeriodSeconds": 0,
                "initContainers": [agent_sidecar(image)],
                "containers": [worker],
                "volumes": [
                    {"name": "data", "emptyDir": {}},
                    {
                        "name": "podinfo",
                        "downwardAPI": {
                            "items": [{"path": "attempt", "fieldRef": {"fieldPath": ATTEMPT_FIELD}}]
                        },
                    },
                ],
            }
        },
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "ipr"},
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"name": "w", "replicas": replicas, "template": {"spec": job}}],
        },
    }


def jobset(node: RealNode, namespace: str) -> dict[str, Any]:
    _, body = node.cluster.request("GET", JOBSETS.format(namespace=namespace) + "/ipr")
    return dict(body)


def pods(node: RealNode, namespace: str) -> list[dict[str, Any]]:
    _, body = node.cluster.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=jobset.sigs.k8s.io/jobset-name=ipr",
    )
    return list(body.get("items", []))


def condition(js: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (js.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def restart_counts(pod: dict[str, Any]) -> dict[str, int]:
    status = pod.get("status") or {}
    return {
        c["name"]: int(c.get("restartCount", 0))
        for c in (status.get("initContainerStatuses") or [])
        + (status.get("containerStatuses") or [])
    }


def create(node: RealNode, namespace: str, manifest: dict[str, Any]) -> None:
    status, body = node.cluster.request("POST", JOBSETS.format(namespace=namespace), manifest)
    assert status == 201, body


def test_a_retriable_failure_restarts_every_pod_in_place_then_the_jobset_completes(
    node: RealNode, image: str, gated_controller: ControllerProcess, namespace: str
) -> None:
    create(node, namespace, in_place_jobset(image))
    first = poll(
        lambda: len(pods(node, namespace)) == 2 and pods(node, namespace),
        "pods",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    uids = {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in first}
    poll(
        lambda: (
            (jobset(node, namespace).get("status") or {}).get("currentInPlaceRestartAttempt") == 1
        ),
        "every pod restarted in place into attempt 1",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    done = poll(
        lambda: condition(jobset(node, namespace), "Completed"),
        "Completed",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    assert done["reason"] == "AllJobsCompleted"
    final = pods(node, namespace)
    assert {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in final} == uids
    for pod in final:
        counts = restart_counts(pod)
        assert counts["worker"] == 1, (pod["metadata"]["name"], counts)
    status = jobset(node, namespace)["status"]
    assert status.get("restarts", 0) == 0  # no Job recreated
    assert status.get("previousInPlaceRestartAttempt") == 0


def test_failing_every_time_reaches_max_restarts(
    node: RealNode, image: str, gated_controller: ControllerProcess, namespace: str
) -> None:
    # The other worker never works: the JobSet fails by its restarts, whatever the machine's pace.
    create(
        node, namespace, in_place_jobset(image, max_restarts=1, fail="always", work_at_attempt=99)
    )
    failed = poll(
        lambda: condition(jobset(node, namespace), "Failed"),
        "Failed",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"] == "jobset failed due to reaching max number of restarts"


def test_a_fatal_exit_code_fails_the_jobset_by_its_rules(
    node: RealNode, image: str, gated_controller: ControllerProcess, namespace: str
) -> None:
    """Exit 4 is not among the retriable codes: the pod fails, the Job's podFailurePolicy fails
    the Job, and the JobSet's FailJobSet rule fails the JobSet."""
    manifest = in_place_jobset(image, fail="fatal", retriable=[3], work_at_attempt=99)
    job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["podFailurePolicy"] = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "worker", "operator": "In", "values": [4]},
            }
        ]
    }
    manifest["spec"]["failurePolicy"]["rules"] = [
        {"name": "fatal", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
    ]
    create(node, namespace, manifest)
    failed = poll(
        lambda: condition(jobset(node, namespace), "Failed"),
        "Failed",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    assert failed["reason"] == "FailJobSetFailurePolicyAction"


def test_a_pod_deleted_by_hand_is_recreated_and_joins_the_barrier(
    node: RealNode, image: str, gated_controller: ControllerProcess, namespace: str
) -> None:
    # Both work only from attempt 1 on: the replacement joins at attempt 1, the kept pod gets
    # there by its in-place restart (before, the kept pod's 20 s of work could end first).
    create(node, namespace, in_place_jobset(image, fail="never", work_seconds=4))

    def attempt() -> int | None:
        value = (jobset(node, namespace).get("status") or {}).get("currentInPlaceRestartAttempt")
        return None if value is None else int(value)

    poll(
        lambda: attempt() == 0,
        "both pods past the barrier at attempt 0",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(node, namespace)}
    doomed = sorted(before)[1]
    status, body = node.cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{doomed}")
    assert status == 200, body
    poll(
        lambda: attempt() == 1,
        "the replacement joins; every pod at attempt 1",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(node, namespace)}
    kept = sorted(before)[0]
    assert after[kept] == before[kept]  # restarted in place, not replaced
    done = poll(
        lambda: condition(jobset(node, namespace), "Completed"),
        "Completed",
        180,
        state=lambda: state(node, namespace, gated_controller),
        interval=0.25,
    )
    assert done["reason"] == "AllJobsCompleted"
