"""Benchmark: a whole JobSet back at work after one worker fails, InPlaceRestart against Recreate.

Why a start cost: KEP-467's case is the time a recreated pod spends before its worker runs
(scheduled again, its image pulled to the node, its data loaded), which an in-place restart does
not pay: the pod keeps its node, its pulled image and its volumes. Pods that start in a second
leave that cost out, so every measurement here gives each new pod a start cost of S seconds
(`--start-costs`, default 0 10 30), the same model for both strategies: every pod pays it when it
is created (both strategies' first start, and every Recreate restart); a pod restarted in place
keeps what it paid.

On the real node (envtest/realnode.py: kubelet + containerd, the controller's image; the kubelet
of Kubernetes 1.36 and later has ContainerRestartRules and RestartAllContainersOnContainerExits on
by default) with the controller (the InPlaceRestart gate on) as a process of its own. One JobSet
of `--pods` Jobs of one pod each, per strategy and start cost, in its own namespace:

- InPlaceRestart: the agent from the image as a native sidecar (upstream's example: the worker
  behind its startup probe, RestartAllContainers on a non-zero exit), `backoffLimit` MaxInt32,
  `podReplacementPolicy: Failed`;
- Recreate: the same worker without the agent, `backoffLimit: 0`: the failed pod fails its Job,
  the JobSet restarts, every Job is deleted and created again.

The start cost there is a real init container, first in the pod (before the agent): it loads
"data" into the pod's emptyDir, S seconds of sleep standing for an image pull and a data load,
unless the emptyDir already holds it (a pod restarted in place keeps its emptyDir; the kubelet
runs the init containers again and this one finds its data). It logs whether it paid or kept,
and the bench prints how many loads each round paid. Each worker appends `<job index>
<time.time()>` to a file on a hostPath volume when it starts, then polls for `fail-<its index>`
there. The bench writes `fail-0` and measures the seconds until every index has started again
after that moment: the time from a worker failure to all workers running again (past the
barrier, for InPlaceRestart). `--rounds` repeats each measurement on the same JobSet.

With `--kwok-pods N` (N > 0, a multiple of 8) also on the full local cluster with kwok nodes (no
containers). The start cost is kwok's: every pod of both strategies carries the
`kwok.jobset.test/start-after: Ss` annotation (kwok_stages.py: S seconds from bound to Running).
InPlaceRestart runs the agents' own code for every pod in one process
(envtest/agent_pool.py, `--kwok-agents pool`, the default; the restart of a pod's containers in
place costs nothing there) or as one agent host process per pod (envtest/agents.py,
`--kwok-agents host`, where starting N processes on two cores dominates); measured from one
agent's failure to `currentInPlaceRestartAttempt` advancing (every agent then lifts its barrier
at once). Recreate from one pod's failure (kwok's fail-exit-code) to every pod of the new
attempt Running.

Printed: per place, pods and start cost, the medians, InPlaceRestart / Recreate, and the
load average around each measurement.

Run (root; hack/node-packages.sh): JOBSET_K8S_BIN=... .venv/bin/python hack/bench/restart_bench.py
     [--pods 4] [--rounds 3] [--start-costs 0 10 30] [--kwok-pods 256] [--kwok-agents pool]
     [--skip-node]
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobset_controller.api.constants import RESTARTS_KEY
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest.agents import HostKubelet
from jobset_controller_dev.envtest.controller import ControllerProcess, start_local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.in_place_restart_fixtures import (
    IN_PLACE_RESTART_GATE,
    INDEX_FIELD,
    JOBSETS,
    PY,
    agent_sidecar,
    restart_all_on_failure,
)
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
    START_AFTER_ANNOTATION,
)
from jobset_controller_dev.envtest.processes import process_cpu
from jobset_controller_dev.envtest.realnode import RealNode, real_node, unavailable
from jobset_controller_dev.image.release import release_files

ROOT = Path(__file__).resolve().parents[2]
RESTARTS_LABEL = RESTARTS_KEY
STRATEGIES = ("InPlaceRestart", "Recreate")
# What in-place restart is for, at a realistic start cost: its time at most this share of
# Recreate's at S = 30 s (printed against the largest --start-costs).
GOAL_RATIO = 0.3
WORKER = """
import os, sys, time
index = os.environ["JOB_INDEX"]
with open("/trigger/up.log", "a") as log:
    log.write(f"{index} {time.time()}\\n")
trigger = f"/trigger/fail-{index}"
while True:
    if os.path.exists(trigger):
        os.remove(trigger)
        sys.exit(3)
    time.sleep(0.05)
"""
# The start cost on the real node: S seconds (argv[1]) of "image pull and data load" into the
# pod's emptyDir, skipped when the emptyDir already holds the data (a pod restarted in place).
LOADER = """
import os, sys, time
index, cost = os.environ["JOB_INDEX"], float(sys.argv[1])
paid = not os.path.exists("/data/loaded")
if paid:
    time.sleep(cost)
    open("/data/loaded", "w").close()
with open("/trigger/load.log", "a") as log:
    log.write(f"{index} {time.time()} {'paid' if paid else 'kept'}\\n")
"""


@dataclass
class Figures:
    """One strategy's measurements at one place and start cost."""

    seconds: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)  # 1-minute load average at each round
    notes: list[str] = field(default_factory=list)  # per round: loads paid, agents' CPU

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def image() -> tuple[str, list[Path]]:
    """The release's image and its archives (pause first), as the node tier installs them:
    what hack/test-env.sh made (JOBSET_RELEASE_DIR, JOBSET_IMAGE_ARCHIVES), else hack/release.sh."""
    release = release_files()
    return release.image, release.archives


def wait(check: Callable[[], Any], what: str, within: float = 300) -> Any:
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"restart_bench: {what}: not within {within:g} s")
        time.sleep(0.02)  # a poll interval: the figure's resolution


def manifest(
    strategy: str, image_name: str, pods: int, trigger_dir: str, start_cost: float
) -> dict[str, Any]:
    in_place = strategy == "InPlaceRestart"
    index_env = [{"name": "JOB_INDEX", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}]
    trigger_mount = {"name": "trigger", "mountPath": "/trigger"}
    worker: dict[str, Any] = {
        "name": "worker",
        "image": image_name,
        "imagePullPolicy": "Never",
        "command": [PY, "-c", WORKER],
        "env": index_env,
        "volumeMounts": [trigger_mount],
    }
    loader: dict[str, Any] = {
        "name": "load",
        "image": image_name,
        "imagePullPolicy": "Never",
        "command": [PY, "-c", LOADER, str(start_cost)],
        "env": index_env,
        "volumeMounts": [trigger_mount, {"name": "data", "mountPath": "/data"}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "initContainers": [loader],
        "containers": [worker],
        "volumes": [
            {"name": "trigger", "hostPath": {"path": trigger_dir, "type": "Directory"}},
            {"name": "data", "emptyDir": {}},
        ],
    }
    job: dict[str, Any] = {"parallelism": 1, "completions": 1, "template": {"spec": pod}}
    if in_place:
        worker.update(restartPolicy="Never", restartPolicyRules=restart_all_on_failure())
        pod["serviceAccountName"] = "in-place-restart-agent"
        pod["initContainers"].append(agent_sidecar(image_name))
        job.update(backoffLimit=2**31 - 1, podReplacementPolicy="Failed")
    else:
        job["backoffLimit"] = 0
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "bench"},
        "spec": {
            "failurePolicy": {"maxRestarts": 100, "restartStrategy": strategy},
            "replicatedJobs": [{"name": "w", "replicas": pods, "template": {"spec": job}}],
        },
    }


def agent_identity(node: RealNode, namespace: str) -> None:
    for document in yaml.safe_load_all(
        (ROOT / "manifests/in-place-restart-agent/rbac.yaml").read_text()
    ):
        kind = document["kind"]
        if kind.startswith("ValidatingAdmissionPolicy"):
            base = "/apis/admissionregistration.k8s.io/v1/"
            path = (
                base
                + {
                    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
                    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
                }[kind]
            )
        elif kind == "ServiceAccount":
            path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        else:
            plural = "roles" if kind == "Role" else "rolebindings"
            path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}"
        for subject in document.get("subjects", ()):
            subject["namespace"] = namespace
        status, body = node.cluster.request("POST", path, document)
        if status not in (201, 409):
            raise SystemExit(f"restart_bench: cannot create the agent's {kind}: {body}")


def starts(log: Path) -> list[tuple[int, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        index, _, stamp = line.partition(" ")
        if stamp:
            out.append((int(index), float(stamp)))
    return out


def loads_since(log: Path, since: float) -> dict[str, int]:
    """How many loads the loader paid and kept after `since` (its log)."""
    out = {"paid": 0, "kept": 0}
    if log.exists():
        for line in log.read_text().splitlines():
            _, stamp, what = line.split(" ")
            if float(stamp) > since:
                out[what] += 1
    return out


def all_started_after(log: Path, since: float, pods: int) -> float | None:
    """The last of the first starts of every index after `since`, or None while one is missing."""
    first: dict[int, float] = {}
    for index, stamp in starts(log):
        if stamp > since and index not in first:
            first[index] = stamp
    return max(first.values()) if len(first) == pods else None


def measure(
    node: RealNode, strategy: str, image_name: str, pods: int, rounds: int, start_cost: float
) -> Figures:
    namespace = f"bench-{strategy.lower()}-{uuid.uuid4().hex[:4]}"
    node.cluster.create_namespace(namespace)
    if strategy == "InPlaceRestart":
        agent_identity(node, namespace)
    inside = f"/tmp/restart-bench-{namespace}"
    host_dir = Path(f"/proc/{node.netns.pid}/root{inside}")
    host_dir.mkdir(mode=0o777)
    host_dir.chmod(0o777)
    log = host_dir / "up.log"
    status, body = node.cluster.request(
        "POST",
        JOBSETS.format(namespace=namespace),
        manifest(strategy, image_name, pods, inside, start_cost),
    )
    if status != 201:
        raise SystemExit(f"restart_bench: JobSet refused: {body}")
    wait(lambda: all_started_after(log, 0, pods), f"{strategy}: every worker started")
    figures = Figures()
    for _ in range(rounds):
        figures.loads.append(os.getloadavg()[0])
        began = time.time()
        (host_dir / "fail-0").write_text("")
        last = wait(
            functools.partial(all_started_after, log, began, pods),
            f"{strategy}: every worker running again",
        )
        figures.seconds.append(last - began)
        loads = loads_since(host_dir / "load.log", began)
        figures.notes.append(f"loads paid {loads['paid']}, kept {loads['kept']}")
        print(
            f"  real node, S = {start_cost:g} s, {strategy}: {last - began:.2f} s "
            f"({figures.notes[-1]}; load {figures.loads[-1]:.1f})",
            file=sys.stderr,
        )
    if strategy == "InPlaceRestart":
        print_timeline(node, namespace, began, log)
    node.cluster.delete_namespace(namespace)
    return figures


def print_timeline(node: RealNode, namespace: str, began: float, log: Path) -> None:
    """The last round, as the agents logged it (seconds after the failure was asked for)."""
    events: list[tuple[float, str]] = []
    _, body = node.cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    for pod in body.get("items", []):
        name = pod["metadata"]["name"]
        for line in node.logs(namespace, name, "in-place-restart-agent").splitlines():
            # The kubelet's CRI log line: <time> <stream> <tag> <the agent's own line>.
            parts = line.split(" ", 3)
            if len(parts) < 4 or " in-place-restart-agent: " not in parts[3]:
                continue
            stamp, _, rest = parts[3].partition(" in-place-restart-agent: ")
            whole = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
            when = whole + (float("0" + stamp[19:-1]) if stamp[19:-1] else 0.0)
            if when >= began - 0.5:
                events.append((when - began, f"{name[-5:]} agent: {rest[:60]}"))
    for index, started in starts(log):
        if started > began:
            events.append((started - began, f"worker {index} started"))
    print("  timeline of the last InPlaceRestart round (s after the failure):", file=sys.stderr)
    for offset, what in sorted(events):
        print(f"    {offset:6.2f}  {what}", file=sys.stderr)


# ------------------------------------------------------------------------------------ kwok
def kwok_manifest(strategy: str, pods: int, start_cost: float) -> dict[str, Any]:
    in_place = strategy == "InPlaceRestart"
    annotations = {RUN_FOREVER_ANNOTATION: "true", START_AFTER_ANNOTATION: f"{start_cost:g}s"}
    job: dict[str, Any] = {
        "parallelism": 8,
        "completions": 8,
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "w"}]},
        },
    }
    if in_place:
        job.update(backoffLimit=2**31 - 1, podReplacementPolicy="Failed")
    else:
        job["backoffLimit"] = 0
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "bench"},
        "spec": {
            "failurePolicy": {"maxRestarts": 100, "restartStrategy": strategy},
            "replicatedJobs": [{"name": "w", "replicas": pods // 8, "template": {"spec": job}}],
        },
    }


async def _until(check: Callable[[], Any], what: str, within: float = 900) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"restart_bench: {what}: not within {within:g} s")
        await asyncio.sleep(0.05)  # a poll interval: the figure's resolution


class PoolAgents:
    """envtest/agent_pool.py as a child process: every pod's agent in one event loop. Its stdout
    is followed: `lifts` holds each pod's last barrier lift (the attempt, and the pool's
    time.monotonic() then: CLOCK_MONOTONIC, the same clock as the bench's). Start, fail and
    close it from one event loop."""

    def __init__(self, cluster: FullCluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.proc: asyncio.subprocess.Process | None = None
        self.log = cluster.workdir / f"agent-pool-{namespace}.log"
        self.lifts: dict[str, tuple[int, float]] = {}
        self._follow: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with self.log.open("wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "jobset_controller_dev.envtest.agent_pool",
                "--kubeconfig", str(self.cluster.kubeconfig),
                "--namespace", self.namespace, "--jobset", "bench",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            )  # fmt: skip
        self._follow = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            fields = line.decode().split()
            if len(fields) == 4 and fields[0] == "lifted":
                self.lifts[fields[1]] = (int(fields[2]), float(fields[3]))

    def lifted(self, attempt: int) -> tuple[int, float]:
        """How many pods' agents last lifted their barrier at `attempt`, and when the last of
        them did (0.0 if none); callable from another thread."""
        times = [when for at, when in list(self.lifts.values()) if at == attempt]
        return len(times), max(times, default=0.0)

    def cpu(self) -> float:
        assert self.proc is not None
        return process_cpu(self.proc.pid)

    async def fail(self, pod: str) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"fail {pod}\n".encode())
        await self.proc.stdin.drain()

    async def close(self) -> None:
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = await self.proc.wait()
        if self._follow is not None:
            await self._follow
        if code != 0:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"the agent pool exited {code}: {tail}")


async def kwok_measure(
    pods: int, start_costs: list[float], rounds: int, agents: str
) -> dict[tuple[float, str], Figures]:
    """Both strategies on kwok nodes at every start cost (module docstring), on one cluster."""
    cluster = FullCluster(pod_run_duration=3600).start()
    controller = _controller(cluster)
    client = await KubeClient.connect(kubeconfig=str(cluster.kubeconfig))
    results: dict[tuple[float, str], Figures] = {}
    try:
        for cost in start_costs:
            for strategy in STRATEGIES:
                results[cost, strategy] = await _kwok_one(
                    cluster, client, strategy, pods, cost, rounds, agents
                )
    finally:
        await client.close()
        controller.stop(60)
        cluster.stop()
    return results


async def _kwok_one(
    cluster: FullCluster,
    client: KubeClient,
    strategy: str,
    pods: int,
    cost: float,
    rounds: int,
    agents: str,
) -> Figures:
    label = f"{strategy.lower()}-{cost:g}".replace(".", "-")
    namespace = cluster.create_namespace(f"bench-{label}")
    jobsets = JOBSETS.format(namespace=namespace)
    pod_path = f"/api/v1/namespaces/{namespace}/pods"
    await client.create(jobsets, kwok_manifest(strategy, pods, cost))
    figures = Figures()

    async def status() -> dict[str, Any]:
        return dict((await client.get(jobsets + "/bench")).get("status") or {})

    async def running(attempt: int) -> bool:
        items = (await client.get(pod_path, labelSelector=f"{RESTARTS_LABEL}={attempt}"))["items"]
        return sum(1 for p in items if p["status"].get("phase") == "Running") == pods

    async def current(value: int) -> bool:
        return (await status()).get("currentInPlaceRestartAttempt") == value

    if strategy == "InPlaceRestart":
        pool = PoolAgents(cluster, namespace) if agents == "pool" else None
        host = None
        if pool is not None:
            await pool.start()
        else:
            host = HostKubelet(client, namespace, cluster.kubeconfig, cluster.workdir, "bench")
            host.run()
        try:
            await _until(lambda: current(0), "every agent at attempt 0")
            for attempt in range(1, rounds + 1):
                victim = sorted(
                    p["metadata"]["name"] for p in (await client.get(pod_path))["items"]
                )[0]
                figures.loads.append(os.getloadavg()[0])
                cpu = pool.cpu() if pool is not None else 0.0
                began = time.monotonic()
                if pool is not None:
                    await pool.fail(victim)
                else:
                    assert host is not None
                    uid = next(u for u, n in host.names.items() if n == victim)
                    await host.kill(uid)
                await _until(
                    functools.partial(current, attempt), f"every agent at attempt {attempt}"
                )
                figures.seconds.append(time.monotonic() - began)
                if pool is not None:
                    figures.notes.append(f"agents' CPU {pool.cpu() - cpu:.2f} s")
                _report("kwok", cost, strategy, figures)
        finally:
            if pool is not None:
                await pool.close()
            if host is not None:
                await host.close()
    else:
        await _until(lambda: running(0), "every pod Running")
        for attempt in range(1, rounds + 1):
            listed = await client.get(pod_path, labelSelector=f"{RESTARTS_LABEL}={attempt - 1}")
            victim = sorted(p["metadata"]["name"] for p in listed["items"])[0]
            figures.loads.append(os.getloadavg()[0])
            began = time.monotonic()
            patch = {
                "metadata": {
                    "annotations": {
                        RUN_FOREVER_ANNOTATION: None,
                        FAIL_EXIT_CODE_ANNOTATION: "3",
                        RUN_DURATION_ANNOTATION: "0s",
                    }
                }
            }
            await client.merge_patch(f"{pod_path}/{victim}", patch)
            await _until(
                functools.partial(running, attempt), f"every pod of attempt {attempt} Running"
            )
            figures.seconds.append(time.monotonic() - began)
            _report("kwok", cost, strategy, figures)
    cluster.delete_namespace(namespace)
    return figures


def _report(where: str, cost: float, strategy: str, figures: Figures) -> None:
    note = f", {figures.notes[-1]}" if figures.notes else ""
    print(
        f"  {where}, S = {cost:g} s, {strategy}: {figures.seconds[-1]:.2f} s"
        f"{note}; load {figures.loads[-1]:.1f}",
        file=sys.stderr,
        flush=True,
    )


def _controller(cluster: Any) -> ControllerProcess:
    """`jobset-controller run` with the InPlaceRestart gate against `cluster`, ready."""
    return start_local_controller(
        workdir=cluster.workdir,
        ca=cluster.ca,
        kubeconfig=cluster.kubeconfig,
        stem="bench",
        sections=IN_PLACE_RESTART_GATE,
    )


def print_table(title: str, pods: int, results: dict[tuple[float, str], Figures]) -> None:
    print(f"\n{title}\n")
    print(
        "| start cost S (s) | pods | InPlaceRestart (s) | Recreate (s) | "
        "InPlaceRestart / Recreate | rounds (in place; Recreate) | load |"
    )
    print("|---:|---:|---:|---:|---:|---|---|")
    for cost in sorted({cost for cost, _ in results}):
        in_place, recreate = results[cost, "InPlaceRestart"], results[cost, "Recreate"]
        loads = in_place.loads + recreate.loads
        rounds = (
            ", ".join(f"{v:.1f}" for v in in_place.seconds)
            + "; "
            + ", ".join(f"{v:.1f}" for v in recreate.seconds)
        )
        print(
            f"| {cost:g} | {pods} | {in_place.median:.2f} | {recreate.median:.2f} | "
            f"{in_place.median / recreate.median:.2f}x | {rounds} | "
            f"{min(loads):.1f}-{max(loads):.1f} |"
        )
    worst = max(cost for cost, _ in results)
    ratio = results[worst, "InPlaceRestart"].median / results[worst, "Recreate"].median
    verdict = "met" if ratio <= GOAL_RATIO else "not met"
    print(
        f"\ngoal: InPlaceRestart <= {GOAL_RATIO:g}x Recreate at the largest start cost "
        f"(S = {worst:g} s): {ratio:.2f}x, {verdict}"
    )
    notes = {key: figures.notes for key, figures in results.items() if figures.notes}
    for (cost, strategy), lines in sorted(notes.items()):
        print(f"  S = {cost:g} s, {strategy}: {'; '.join(lines)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--start-costs", type=float, nargs="+", default=[0.0, 10.0, 30.0],
        help="seconds each new pod takes before its worker runs (default 0 10 30)",
    )  # fmt: skip
    parser.add_argument("--kwok-pods", type=int, default=0, help="a multiple of 8; 0 skips kwok")
    parser.add_argument(
        "--kwok-agents", choices=("pool", "host"), default="pool",
        help="kwok's agents: every pod's in one process (pool) or a process per pod (host)",
    )  # fmt: skip
    parser.add_argument("--skip-node", action="store_true", help="kwok only")
    args = parser.parse_args()
    if args.kwok_pods % 8:
        parser.error("--kwok-pods must be a multiple of 8")
    if args.kwok_pods:
        kwok = asyncio.run(
            kwok_measure(args.kwok_pods, args.start_costs, args.rounds, args.kwok_agents)
        )
        agents = (
            "every agent in one process" if args.kwok_agents == "pool" else "a process per agent"
        )
        print_table(
            f"kwok, {args.kwok_pods} pods ({agents}), start cost kwok's start-after, medians of "
            f"{args.rounds}",
            args.kwok_pods,
            kwok,
        )
    if args.skip_node:
        return 0
    why = unavailable()
    if why is not None:
        print(f"restart_bench: the real node cannot run here: {why}", file=sys.stderr)
        return 2
    image_name, archives = image()
    results: dict[tuple[float, str], Figures] = {}
    with real_node(archives) as node:
        controller = _controller(node.cluster)
        try:
            for cost in args.start_costs:
                for strategy in STRATEGIES:
                    results[cost, strategy] = measure(
                        node, strategy, image_name, args.pods, args.rounds, cost
                    )
        finally:
            controller.stop(60)
    print_table(
        f"real node, {args.pods} pods, start cost an init container (S s unless its emptyDir "
        f"holds the data), medians of {args.rounds}",
        args.pods,
        results,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
