"""In-place restart end to end on the real API server (issue 25): the controller with the
InPlaceRestart gate and one agent process per pod, as the ServiceAccounts they run as in a
cluster. No kubelet here: pods are created by the test, and the test restarts an agent that
exited with the restart code, as the kubelet's restart-all-containers rule would."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_in_place_restart_agent import (
    agent_kubeconfig,  # noqa: F401 - a fixture used here
    jobset_manifest,
)

from jobset_controller.config import parse_configuration
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest.polling import eventually, scaled

pytestmark = pytest.mark.integration

AGENT = Path(sys.executable).parent / "in-place-restart-agent"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
ATTEMPT = "jobset.sigs.k8s.io/in-place-restart-attempt"
RESTART_CODE = 42


@pytest.fixture
async def in_place_controller(
    controller_account: tuple[str, Path], tmp_path: Path
) -> AsyncIterator[Manager]:
    """The controller with the InPlaceRestart gate, as the shipped ServiceAccount."""
    home, kubeconfig = controller_account
    config = parse_configuration(
        {
            "leaderElection": {"resourceNamespace": home},
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path / "webhook")},
            "featureGates": {"InPlaceRestart": True},
        }
    )
    options = ManagerOptions(
        config=config,
        kubeconfig=str(kubeconfig),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        leader_elect=False,
    )
    manager = Manager(options)
    task = asyncio.create_task(manager.run())
    await eventually(lambda: manager.caches_synced() or task.done(), "the caches sync", within=30)
    if task.done():
        task.result()
    try:
        yield manager
    finally:
        manager.request_stop()
        assert await asyncio.wait_for(task, scaled(30)) == 0


class Pods:
    """N pods of one JobSet and the agent process of each (sidecar mode, the probe unused)."""

    def __init__(self, kube: KubeClient, namespace: str, kubeconfig: Path, tmp: Path) -> None:
        self.kube, self.namespace, self.kubeconfig = kube, namespace, kubeconfig
        self.namespace_file = tmp / "namespace"
        self.namespace_file.write_text(namespace)
        self.agents: dict[str, asyncio.subprocess.Process] = {}

    async def create(self, name: str) -> None:
        body = {
            "metadata": {
                "name": name,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": "js",
                    "jobset.sigs.k8s.io/job-key": "key",
                },
            },
            "spec": {
                "serviceAccountName": "in-place-restart-agent",
                "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }
        await self.kube.create(f"/api/v1/namespaces/{self.namespace}/pods", body)

    async def start_agent(self, name: str, port: int) -> None:
        environ = {
            "PATH": os.environ["PATH"],
            "JOBSET_NAME": "js",
            "POD_NAME": name,
            "STARTUP_PROBE_PORT": str(port),
            "IN_PLACE_RESTART_EXIT_CODE": str(RESTART_CODE),
        }
        self.agents[name] = await asyncio.create_subprocess_exec(
            str(AGENT),
            "--kubeconfig", str(self.kubeconfig),
            "--namespace-file", str(self.namespace_file),
            env=environ,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def attempts(self) -> dict[str, str | None]:
        listed = await self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/pods",
            labelSelector="jobset.sigs.k8s.io/jobset-name=js",
        )
        return {
            p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(ATTEMPT)
            for p in listed["items"]
        }

    async def stop(self) -> None:
        for process in self.agents.values():
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.fixture
async def pods(
    kube: KubeClient,
    namespace: str,
    agent_kubeconfig: Path,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> AsyncIterator[Pods]:
    group = Pods(kube, namespace, agent_kubeconfig, tmp_path)
    try:
        yield group
    finally:
        await group.stop()


async def status_of(kube: KubeClient, namespace: str) -> dict[str, Any]:
    js = await kube.get(JOBSETS.format(ns=namespace) + "/js")
    return dict(js.get("status") or {})


async def test_one_pod_restarting_restarts_every_pod_in_place_behind_the_barrier(
    kube: KubeClient, namespace: str, in_place_controller: Manager, pods: Pods
) -> None:
    from jobset_controller_dev.envtest.processes import free_port

    manifest = jobset_manifest()
    manifest["spec"]["replicatedJobs"][0]["replicas"] = 3
    await kube.create(JOBSETS.format(ns=namespace), manifest)
    names = [f"js-w-{index}-0-x" for index in range(3)]
    ports = {name: free_port() for name in names}
    for name in names:
        await pods.create(name)
        await pods.start_agent(name, ports[name])

    async def current_is(value: int) -> bool:
        return (await status_of(kube, namespace)).get("currentInPlaceRestartAttempt") == value

    await eventually(lambda: current_is(0), "every pod at attempt 0 lifts the barrier", 30)
    # One pod's containers restart (the kubelet restarts its agent): it joins attempt 1.
    first = names[0]
    pods.agents[first].kill()
    await pods.agents[first].wait()
    await pods.start_agent(first, ports[first])

    async def previous_is(value: int) -> bool:
        return (await status_of(kube, namespace)).get("previousInPlaceRestartAttempt") == value

    await eventually(lambda: previous_is(0), "the controller asks attempt 0 to restart", 30)
    for name in names[1:]:
        code = await asyncio.wait_for(pods.agents[name].wait(), scaled(30))
        assert code == RESTART_CODE
        await pods.start_agent(name, ports[name])  # as the kubelet restarts the containers
    await eventually(lambda: current_is(1), "every pod at attempt 1 lifts the barrier", 30)
    assert set((await pods.attempts()).values()) == {"1"}
    status = await status_of(kube, namespace)
    assert status.get("restarts", 0) == 0  # no Job was recreated
    assert not any(c["type"] == "Failed" for c in status.get("conditions", []))


async def test_a_bad_annotation_is_a_warning_event_and_the_jobset_runs_on(
    kube: KubeClient, namespace: str, in_place_controller: Manager, pods: Pods
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())
    await pods.create("js-w-0-0-x")
    path = f"/api/v1/namespaces/{namespace}/pods/js-w-0-0-x"
    await kube.merge_patch(path, {"metadata": {"annotations": {ATTEMPT: "-1"}}})

    async def warned() -> bool:
        events = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        return any(e.get("reason") == "InvalidInPlaceRestartAttempt" for e in events["items"])

    await eventually(warned, "a Warning event InvalidInPlaceRestartAttempt", 30)
    await kube.merge_patch(path, {"metadata": {"annotations": {ATTEMPT: "0"}}})

    async def current_zero() -> bool:
        return (await status_of(kube, namespace)).get("currentInPlaceRestartAttempt") == 0

    await eventually(current_zero, "the fixed annotation lifts the barrier", 30)


async def test_container_restarts_past_max_restarts_fail_the_jobset(
    kube: KubeClient, namespace: str, in_place_controller: Manager, pods: Pods
) -> None:
    await kube.create(JOBSETS.format(ns=namespace), jobset_manifest())  # maxRestarts 3
    await pods.create("js-w-0-0-x")
    status = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "busybox",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                }
            ],
        }
    }
    await kube.merge_patch(f"/api/v1/namespaces/{namespace}/pods/js-w-0-0-x/status", status)

    async def failed() -> bool:
        conditions = (await status_of(kube, namespace)).get("conditions", [])
        return any(
            c["type"] == "Failed" and c["reason"] == "ReachedMaxRestarts" for c in conditions
        )

    await eventually(failed, "Failed ReachedMaxRestarts", 30)
