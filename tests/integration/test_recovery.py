"""The controller rides out an API server restart and an etcd compaction without being restarted.

Why: in a cluster the API server restarts on upgrades and certificate rotation, and etcd compacts
its history every few minutes. Both break the controller's watches; after a compaction a watch
cannot resume where it stopped (410 Gone) and the informer must list again. If any of that is
mishandled the process dies, or lives on with a stale cache and leaves JobSets unreconciled,
which a liveness probe would never notice. So: one `jobset-controller run` process, JobSets
created before, between and after the disruptions, all of them must finish, the process must
still be alive, and its probes must answer.

Leader election is off: with it on, a restart longer than renewDeadline deliberately ends the
process (losing the Lease must stop a leader), which is a different behaviour from the one tested.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.api.constants import JOBSET_NAME_KEY, RESTARTS_KEY
from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.identities import shipped_rbac
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import eventually
from jobset_controller_dev.envtest.processes import free_port

ACCOUNT = "controller-manager"


def _jobset(name: str, **spec: Any) -> dict[str, Any]:
    workers = replicated_job("workers", 2, backoff_limit=0)
    return jobset_manifest(name, replicated_jobs=[workers], **spec)


class Workload:
    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.sim = KubeSim(kube, namespace)

    def path(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.namespace}/jobsets"
        return f"{base}/{name}" if name else base

    async def current_jobs(self, jobset: str) -> list[dict[str, Any]]:
        """The live Jobs of the JobSet's current attempt (after playing the garbage collector)."""
        await self.sim.collect_garbage()
        js = await self.kube.get(self.path(jobset))
        attempt = str((js.get("status") or {}).get("restarts") or 0)
        return [
            job
            for job in await self.sim.jobs()
            if job["metadata"]["labels"].get(JOBSET_NAME_KEY) == jobset
            and job["metadata"]["labels"].get(RESTARTS_KEY) == attempt
            and not job["metadata"].get("deletionTimestamp")
        ]

    async def wait_jobs(self, jobset: str, within: float = 90) -> list[str]:
        found: list[str] = []

        async def two_jobs() -> bool:
            found[:] = [j["metadata"]["name"] for j in await self.current_jobs(jobset)]
            return len(found) == 2

        await eventually(
            two_jobs,
            f"{jobset}: both Jobs of the current attempt",
            within,
            interval=0.25,
            tolerate=(ApiError, OSError),
            state=lambda: f"Jobs of the current attempt: {found}",
        )
        return found

    async def complete_all(self, jobset: str) -> None:
        for name in await self.wait_jobs(jobset):
            await self.sim.complete(name)

    async def status(self, jobset: str) -> dict[str, Any]:
        return (await self.kube.get(self.path(jobset))).get("status") or {}


@pytest.fixture
def run_controller(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ControllerProcess]:
    """`jobset-controller run` as the shipped ServiceAccount."""
    home = f"jobset-recovery-{uuid.uuid4().hex[:6]}"
    certs = tmp_path / "no-certs"  # no serving certificates: no webhook server
    certs.mkdir()
    config = tmp_path / "config.yaml"
    write_configuration(
        config,
        {
            "leaderElection": {"leaderElect": False},
            "webhook": {"certDir": str(certs)},
            "internalCertManagement": {"enable": False},
        },
    )
    log = tmp_path / "controller.log"
    health = free_port()
    with shipped_rbac(control_plane, home, [ACCOUNT], tmp_path) as kubeconfigs:
        process = ControllerProcess(
            kubeconfig=kubeconfigs[ACCOUNT],
            config=config,
            log=log,
            health_port=health,
            args=["--log-format=json"],
        )
        try:
            yield process
        finally:
            process.stop(30)
    control_plane.delete_namespace(home)


def _log_messages(log: Path) -> list[dict[str, Any]]:
    entries = []
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


async def test_controller_recovers_from_apiserver_restart_and_etcd_compaction_without_restart(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    run_controller: ControllerProcess,
) -> None:
    process = run_controller
    work = Workload(kube, namespace)
    clients: list[KubeClient] = []

    async def restart_apiserver() -> Workload:
        """Restart it (on this thread: see ControlPlane.restart_apiserver) and give the test a
        new client: the old one's pooled connections died with the server."""
        control_plane.restart_apiserver()
        client = await KubeClient.connect(kubeconfig=str(control_plane.kubeconfig))
        clients.append(client)
        return Workload(client, namespace)

    try:
        await _run_disruptions(control_plane, work, namespace, process, restart_apiserver)
    finally:
        for client in clients:
            await client.close()


async def _run_disruptions(
    control_plane: ControlPlane,
    work: Workload,
    namespace: str,
    process: ControllerProcess,
    restart_apiserver: Callable[[], Awaitable[Workload]],
) -> None:
    kube = work.kube

    async def ready() -> bool:
        return await asyncio.to_thread(process.probe, "/readyz") == 200

    await eventually(ready, "controller ready", 90, interval=0.25, tolerate=(ApiError, OSError))

    # Before: Jobs created, one JobSet already completes.
    await kube.create(work.path(), _jobset("before-0"))
    await kube.create(work.path(), _jobset("before-1", failurePolicy={"maxRestarts": 1}))
    await work.complete_all("before-0")
    await work.wait_jobs("before-1")

    # Disruption 1: the API server restarts. Right after it, a new JobSet and a Job failure
    # that the controller can only learn about through re-established watches.
    work = await restart_apiserver()
    kube = work.kube
    await kube.create(work.path(), _jobset("during-0"))
    await work.sim.fail((await work.wait_jobs("before-1"))[0])

    async def before_1_restarted() -> bool:
        return (await work.status("before-1")).get("restarts") == 1

    await eventually(
        before_1_restarted,
        "before-1 restarted after its failure",
        90,
        interval=0.25,
        tolerate=(ApiError, OSError),
    )
    await work.wait_jobs("during-0")

    # Disruption 2: etcd compacts its history while everything runs (the API server's watch
    # cache must relist; watches from old resourceVersions may be refused with 410 Gone).
    await _compact(control_plane, kube, namespace)
    await kube.create(work.path(), _jobset("during-1"))
    await work.complete_all("during-0")

    # Disruption 3: compaction, then an API server restart: its new watch cache starts at the
    # current revision, so the controller's resourceVersions are all too old and every informer
    # must list again; meanwhile Jobs finish that it only sees through that list.
    await work.wait_jobs("during-1")
    await _compact(control_plane, kube, namespace)
    work = await restart_apiserver()
    kube = work.kube
    await work.complete_all("before-1")
    await work.complete_all("during-1")

    # After: a JobSet created once everything is calm again.
    await kube.create(work.path(), _jobset("after-0"))
    await work.complete_all("after-0")

    names = ["before-0", "before-1", "during-0", "during-1", "after-0"]

    async def all_completed() -> bool:
        states = [(await work.status(n)).get("terminalState") for n in names]
        return states == ["Completed"] * len(names)

    await eventually(
        all_completed, f"{names} all Completed", 120, interval=0.25, tolerate=(ApiError, OSError)
    )
    assert (await work.status("before-1")).get("restarts") == 1
    assert process.proc.poll() is None, process.tail()
    assert await asyncio.to_thread(process.probe, "/healthz") == 200
    assert await asyncio.to_thread(process.probe, "/readyz") == 200
    # The disruptions reached the controller (else this test proved nothing): its informers
    # logged a broken watch or an expired resourceVersion.
    noticed = {
        entry.get("msg")
        for entry in _log_messages(process.log)
        if entry.get("msg") in ("list/watch failed", "watch expired, relisting")
    }
    assert noticed, f"no watch trouble logged: {process.tail()}"


async def _compact(control_plane: ControlPlane, kube: KubeClient, namespace: str) -> None:
    """Compact etcd at its current revision (a ConfigMap write first moves the revision past
    every resourceVersion the controller has seen)."""
    marker = await kube.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"generateName": "compaction-"}, "data": {}},
    )
    revision = marker["metadata"]["resourceVersion"]
    await asyncio.to_thread(control_plane.etcdctl, "compact", revision)
