"""In-place restart on the full local cluster (issue 25): the Job controller, the scheduler and
kwok nodes, our controller with the InPlaceRestart gate, and one agent per pod as a host process
(what the kubelet would run; `HostKubelet` below also restarts an agent that exits with the
restart code, as the kubelet's restart-all-containers rule restarts the pod's containers).

The cluster is this module's own (pods stay Running for an hour): the session's controller runs
without the gate. JOBSET_E2E_IN_PLACE_PODS sets the pod count (default 64; 256 fits in ~8 GiB).
The second test drives every pod's agent from one event loop (envtest/agent_pool.py, what
hack/bench/restart_bench.py measures with), so the bench's figures rest on a tested barrier.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.kubeconfig import load as load_access
from jobset_controller_dev.envtest.agent_pool import AgentPool
from jobset_controller_dev.envtest.agents import HostKubelet
from jobset_controller_dev.envtest.controller import ControllerProcess, local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.in_place_restart_fixtures import IN_PLACE_RESTART_GATE
from jobset_controller_dev.envtest.polling import eventually
from jobset_controller_dev.envtest.processes import processes_mentioning

pytestmark = pytest.mark.e2e

ATTEMPT = "jobset.sigs.k8s.io/in-place-restart-attempt"
PODS = int(os.environ.get("JOBSET_E2E_IN_PLACE_PODS", "64"))
PARALLELISM = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[FullCluster]:
    cluster = FullCluster(pod_run_duration=3600).start()
    marker = str(cluster.workdir)
    try:
        yield cluster
    finally:
        cluster.stop()
        assert processes_mentioning(marker) == []


@pytest.fixture(scope="module")
def gated_controller(cluster: FullCluster) -> Iterator[ControllerProcess]:
    with local_controller(cluster, stem="in-place", sections=IN_PLACE_RESTART_GATE) as process:
        yield process


@pytest.fixture
def namespace(cluster: FullCluster) -> Iterator[str]:
    name = cluster.create_namespace(f"inplace-{os.urandom(4).hex()}")
    try:
        yield name
    finally:
        cluster.delete_namespace(name)


@pytest.fixture
async def kubelet(
    kube: KubeClient, namespace: str, cluster: FullCluster, tmp_path: Path
) -> AsyncIterator[HostKubelet]:
    host = HostKubelet(kube, namespace, cluster.kubeconfig, tmp_path)
    host.run()
    try:
        yield host
    finally:
        await host.close()


def manifest() -> dict[str, Any]:
    job = {
        "parallelism": PARALLELISM,
        "completions": PARALLELISM,
        "backoffLimit": 2**31 - 1,
        "podReplacementPolicy": "Failed",
        "template": {
            "metadata": {"annotations": {"kwok.jobset.test/run-duration": "3600s"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "w"}]},
        },
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "failurePolicy": {"maxRestarts": 5, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [
                {"name": "w", "replicas": PODS // PARALLELISM, "template": {"spec": job}}
            ],
        },
    }


async def status(kube: KubeClient, namespace: str) -> dict[str, Any]:
    js = await kube.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/js")
    return dict(js.get("status") or {})


async def wait_current(kube: KubeClient, namespace: str, value: int, what: str) -> float:
    async def reached() -> bool:
        return (await status(kube, namespace)).get("currentInPlaceRestartAttempt") == value

    return await eventually(reached, what, within=120, interval=0.1)


async def test_in_place_restarts_keep_every_pod_and_a_deleted_pod_joins_the_barrier(
    kube: KubeClient, namespace: str, gated_controller: ControllerProcess, kubelet: HostKubelet
) -> None:
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    await kube.create(path, manifest())
    await wait_current(kube, namespace, 0, f"all {PODS} pods at attempt 0 lift the barrier")
    uids = {p["metadata"]["uid"] for p in await kubelet.pods()}
    assert len(uids) == PODS

    # A worker fails in one pod: the kubelet restarts all of its containers (its agent included).
    victim = sorted(kubelet.agents)[0]
    began = time.monotonic()
    await kubelet.kill(victim)  # the loop starts it again: it joins attempt 1
    await wait_current(kube, namespace, 1, "every pod restarts in place into attempt 1")
    seconds = time.monotonic() - began
    print(f"in-place restart of {PODS} pods on kwok: {seconds:.2f} s")
    assert {p["metadata"]["uid"] for p in await kubelet.pods()} == uids  # no pod replaced
    others = set(uids) - {victim}
    assert all(kubelet.restarts.get(uid, 0) == 1 for uid in others)
    current = await status(kube, namespace)
    assert current.get("restarts", 0) == 0  # no Job recreated
    assert current.get("previousInPlaceRestartAttempt") == 0

    # A pod deleted by hand: the Job controller recreates it and its agent joins attempt 2.
    doomed = kubelet.names[sorted(others)[0]]
    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{doomed}")
    await wait_current(kube, namespace, 2, "the replacement pod joins; all at attempt 2")
    after = {p["metadata"]["uid"] for p in await kubelet.pods()}
    assert len(after) == PODS
    assert len(after - uids) == 1
    assert kubelet.unexpected == []


async def test_every_agent_in_one_process_restarts_every_pod_in_place(
    kube: KubeClient, namespace: str, gated_controller: ControllerProcess, cluster: FullCluster
) -> None:
    """The agent pool: each pod's agent is the agent's own code with a connection of its own,
    all in this test's event loop; a failed agent is started again for its pod, as is one that
    exits with the restart code."""
    pool = AgentPool(await load_access(str(cluster.kubeconfig), None), namespace, "js")
    following = asyncio.create_task(pool.run())
    try:
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
        await kube.create(path, manifest())
        await wait_current(kube, namespace, 0, f"all {PODS} pooled agents at attempt 0")
        uids = set(pool.tasks)
        assert len(uids) == PODS

        victim = sorted(pool.names.values())[0]
        assert pool.fail(victim)
        began = time.monotonic()
        await wait_current(kube, namespace, 1, "every pod restarts in place into attempt 1")
        print(f"in-place restart of {PODS} pods, agents in one process: "
              f"{time.monotonic() - began:.2f} s")  # fmt: skip
        assert set(pool.tasks) == uids  # no pod replaced, none left without its agent
        assert all(pool.restarts.get(uid) == 1 for uid in uids), pool.restarts
        current = await status(kube, namespace)
        assert current.get("restarts", 0) == 0  # no Job recreated

        # A pod deleted by hand: its agent stops, the replacement's joins attempt 2.
        doomed = next(uid for uid in sorted(uids) if pool.names[uid] != victim)
        await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pool.names[doomed]}")
        await wait_current(kube, namespace, 2, "the replacement pod joins; all at attempt 2")
        assert doomed not in pool.tasks
        assert len(pool.tasks) == PODS
        assert pool.unexpected == []
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
