"""In-place restart agents for the pods of one JobSet on kwok nodes, all in one process.

`HostKubelet` (agents.py) starts one `in-place-restart-agent` process per pod, as real nodes do:
on a 2-core machine, a restart of 64 pods then waits for 64 Python processes to start on shared
cores, which real nodes do in parallel, one per node, so the figure measures this machine. Here
one event loop drives the agent's own code (`jobset_controller.agent.Agent`: its list and watch
of the JobSet, its attempt annotation, its barrier) for every Running pod, each agent with a
client and connection of its own (its own watch, as a real agent has). A restart in place is a
new `Agent` for the same pod, started at once: what the kubelet's restart-all-containers rule
runs, without a process start. So a figure measures the barrier (the agents' annotations, the
controller's pass, the watch events back), and the container restart itself costs nothing here
(the real node's figures have the kubelet's).

Run as a process of its own (`python -m jobset_controller_dev.envtest.agent_pool --kubeconfig K
--namespace N --jobset J`) so the agents' CPU is theirs alone and can be read from /proc: a
line `fail <pod name>` on stdin ends that pod's agent as its worker's failure would (the
kubelet's rule then restarts all of the pod's containers: a new agent). The agents' log lines
go to stderr; a line `restarted <pod name> <count>` on stdout follows every restart in place, and
`lifted <pod name> <attempt> <time.monotonic()>` every barrier lifted (CLOCK_MONOTONIC, which a
bench's own clock reads alike). Used by hack/bench/restart_bench.py and recovery_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Mapping
from typing import Any

from jobset_controller.agent import Agent, Env
from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.runtime.client import ClientSettings, KubeClient
from jobset_controller.runtime.kubeconfig import ClusterAccess
from jobset_controller.runtime.kubeconfig import load as load_access

RESTART_CODE = 42
JOBSET_NAME_LABEL = JOBSET_NAME_KEY
# A watch's silence longer than this means it is dead (the server ends watches sooner).
_READ_TIMEOUT = 330.0


class _ReportingAgent(Agent):
    """The agent, saying on stdout when it lifts its barrier (module docstring)."""

    async def reconcile(self, jobset: Mapping[str, Any]) -> None:
        active = self.barrier_active
        await super().reconcile(jobset)
        if active and not self.barrier_active:
            print(f"lifted {self.env.pod_name} {self.attempt} {time.monotonic()!r}", flush=True)


class AgentPool:
    """One `Agent` per Running pod of the JobSet, started again for the same pod when it exits
    with the restart code or is failed (module docstring)."""

    def __init__(self, access: ClusterAccess, namespace: str, jobset: str) -> None:
        self.access, self.namespace, self.jobset = access, namespace, jobset
        self.settings = ClientSettings(user_agent="in-place-restart-agent", request_timeout=30.0)
        self.clients: dict[str, KubeClient] = {}  # pod uid -> the pod's agent's client
        self.tasks: dict[str, asyncio.Task[int]] = {}  # pod uid -> its agent's run
        self.names: dict[str, str] = {}  # pod uid -> name
        self.restarts: dict[str, int] = {}
        self.failing: set[str] = set()  # pods whose agent was failed on purpose
        self.unexpected: list[str] = []

    def start(self, uid: str, name: str) -> None:
        client = self.clients.get(uid)
        if client is None:
            client = self.clients[uid] = KubeClient.for_access(self.access, settings=self.settings)
        env = Env(self.namespace, self.jobset, name, RESTART_CODE, probe_port=0)
        task = asyncio.create_task(_ReportingAgent(env, client).run())
        self.tasks[uid], self.names[uid] = task, name
        task.add_done_callback(lambda done: self._ended(uid, done))

    def _ended(self, uid: str, task: asyncio.Task[int]) -> None:
        if self.tasks.get(uid) is not task:
            return  # the pod is gone; its agent was stopped
        failed = uid in self.failing
        self.failing.discard(uid)
        if not task.cancelled() and task.exception() is not None:
            self.unexpected.append(f"{self.names[uid]}: {task.exception()!r}")
            return
        code = None if task.cancelled() else task.result()
        if code != RESTART_CODE and not failed:
            self.unexpected.append(f"{self.names[uid]}: ended with {code}")
            return
        self.restarts[uid] = self.restarts.get(uid, 0) + 1
        print(f"restarted {self.names[uid]} {self.restarts[uid]}", flush=True)
        self.start(uid, self.names[uid])

    def fail(self, name: str) -> bool:
        """End the agent of pod `name` as a failure of its worker would; False if unknown."""
        for uid, known in self.names.items():
            if known == name and uid in self.tasks:
                self.failing.add(uid)
                self.tasks[uid].cancel()
                return True
        return False

    async def stop(self, uid: str) -> None:
        task = self.tasks.pop(uid, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        client = self.clients.pop(uid, None)
        if client is not None:
            await client.close()

    def observe(self, pod: Mapping[str, Any], deleted: bool = False) -> list[str]:
        """Start the agent of a pod that runs; returns the uids whose agents must stop."""
        meta = pod["metadata"]
        uid = meta["uid"]
        running = (pod.get("status") or {}).get("phase") == "Running"
        if deleted or meta.get("deletionTimestamp") or not running:
            return [uid] if uid in self.tasks else []
        if uid not in self.tasks:
            self.start(uid, meta["name"])
        return []

    async def run(self) -> None:
        """Follow the JobSet's pods (a list, then a watch; again after a failed watch)."""
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        selector = f"{JOBSET_NAME_LABEL}={self.jobset}"
        watcher = KubeClient.for_access(self.access, settings=self.settings)
        try:
            while True:
                try:
                    listed = await watcher.get(path, labelSelector=selector)
                    for pod in listed.get("items") or ():
                        for uid in self.observe(pod):
                            await self.stop(uid)
                    version = listed["metadata"]["resourceVersion"]
                    while True:
                        params = {
                            "labelSelector": selector,
                            "resourceVersion": version,
                            "allowWatchBookmarks": True,
                            "timeoutSeconds": 300,
                        }
                        async for event in watcher.watch(
                            path, params=params, read_timeout=_READ_TIMEOUT
                        ):
                            kind, pod = event.get("type"), event.get("object") or {}
                            if kind == "ERROR":
                                raise RuntimeError(str(pod.get("message")))
                            version = pod["metadata"].get("resourceVersion", version)
                            if kind in ("ADDED", "MODIFIED", "DELETED"):
                                for uid in self.observe(pod, deleted=kind == "DELETED"):
                                    await self.stop(uid)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    print(f"agent pool: the pod watch failed ({error}); again", file=sys.stderr)
                    await asyncio.sleep(0.5)  # before the next list: a retry's pace
        finally:
            await watcher.close()
            for uid in list(self.tasks):
                await self.stop(uid)


async def _commands(pool: AgentPool) -> None:
    """`fail <pod name>` lines from stdin, until it closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        verb, _, name = line.decode().strip().partition(" ")
        if verb == "fail" and not pool.fail(name):
            print(f"agent pool: no agent for pod {name!r}", file=sys.stderr, flush=True)


async def _main(args: argparse.Namespace) -> int:
    access = await load_access(args.kubeconfig, None)
    pool = AgentPool(access, args.namespace, args.jobset)
    following = asyncio.create_task(pool.run())
    try:
        await _commands(pool)  # until the parent closes stdin
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
    for line in pool.unexpected:
        print(f"agent pool: unexpected: {line}", file=sys.stderr)
    return 1 if pool.unexpected else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--jobset", required=True)
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
