"""Agents of in-place restart as host processes: a stand-in kubelet for pods on kwok nodes.

`HostKubelet` runs one `in-place-restart-agent` process (sidecar mode, a free probe port each)
per Running pod of a JobSet, authenticated by a kubeconfig, and starts an agent again for the
same pod when it exits, as the kubelet's restart-all-containers rule restarts a pod's containers
in place. Used by tests/e2e/test_in_place_restart.py and hack/bench/restart_bench.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest.processes import free_port

AGENT = Path(sys.executable).parent / "in-place-restart-agent"
RESTART_CODE = 42


class HostKubelet:
    """One agent process per Running pod of the JobSet; an agent that exits with the restart
    code is started again for the same pod (its containers restarted in place)."""

    def __init__(
        self, kube: KubeClient, namespace: str, kubeconfig: Path, tmp: Path, jobset: str = "js"
    ) -> None:
        self.kube, self.namespace, self.kubeconfig = kube, namespace, kubeconfig
        self.jobset = jobset
        self.namespace_file = tmp / "namespace"
        self.namespace_file.write_text(namespace)
        self.agents: dict[str, asyncio.subprocess.Process] = {}  # pod uid -> agent
        self.names: dict[str, str] = {}  # pod uid -> name
        self.restarts: dict[str, int] = {}  # pod uid -> in-place restarts
        self.unexpected: list[str] = []
        self.killed: set[str] = set()  # pods whose agent the test killed (a worker failure)
        self._task: asyncio.Task[None] | None = None

    async def start(self, name: str, uid: str) -> None:
        environ = {
            "PATH": os.environ["PATH"],
            "JOBSET_NAME": self.jobset,
            "POD_NAME": name,
            "STARTUP_PROBE_PORT": str(free_port()),
            "IN_PLACE_RESTART_EXIT_CODE": str(RESTART_CODE),
        }
        self.agents[uid] = await asyncio.create_subprocess_exec(
            str(AGENT),
            "--kubeconfig", str(self.kubeconfig),
            "--namespace-file", str(self.namespace_file),
            env=environ,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        self.names[uid] = name

    async def pods(self) -> list[dict[str, Any]]:
        listed = await self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/pods",
            labelSelector=f"{JOBSET_NAME_KEY}={self.jobset}",
        )
        return list(listed["items"])

    async def _loop(self) -> None:
        while True:
            running = {}
            for pod in await self.pods():
                meta = pod["metadata"]
                if pod["status"].get("phase") == "Running" and not meta.get("deletionTimestamp"):
                    running[meta["uid"]] = meta["name"]
            for uid, name in running.items():
                agent = self.agents.get(uid)
                if agent is None:
                    await self.start(name, uid)
                elif agent.returncode is not None:
                    if agent.returncode != RESTART_CODE and uid not in self.killed:
                        self.unexpected.append(f"{name}: exit {agent.returncode}")
                    self.restarts[uid] = self.restarts.get(uid, 0) + 1
                    await self.start(name, uid)
            for uid in set(self.agents) - set(running):
                await self.kill(uid)
                del self.agents[uid]
            await asyncio.sleep(0.1)  # the poll interval of this stand-in kubelet

    async def kill(self, uid: str) -> None:
        self.killed.add(uid)
        agent = self.agents[uid]
        if agent.returncode is None:
            agent.kill()
        await agent.wait()

    def run(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        assert self._task is not None
        self._task.cancel()
        for uid in list(self.agents):
            await self.kill(uid)
