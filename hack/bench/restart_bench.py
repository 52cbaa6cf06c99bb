"""Benchmark: a whole JobSet back at work after one worker fails, InPlaceRestart against Recreate.

On the real node (envtest/realnode.py: kubelet + containerd, the controller's image; the kubelet
of Kubernetes 1.36 has ContainerRestartRules and RestartAllContainersOnContainerExits on by
default) with the controller (the InPlaceRestart gate on) as a process of its own. One JobSet of
`--pods` Jobs of one pod each, per strategy, in its own namespace:

- InPlaceRestart: the agent from the image as a native sidecar (upstream's example: the worker
  behind its startup probe, RestartAllContainers on a non-zero exit), `backoffLimit` MaxInt32,
  `podReplacementPolicy: Failed`;
- Recreate: the same worker without the agent, `backoffLimit: 0`: the failed pod fails its Job,
  the JobSet restarts, every Job is deleted and created again.

Each worker appends `<job index> <time.time()>` to a file on a hostPath volume when it starts,
then polls for `fail-<its index>` there. The bench writes `fail-0` and measures the seconds until
every index has started again after that moment: the time from a worker failure to all workers
running again (past the barrier, for InPlaceRestart). `--rounds` repeats each measurement on the
same JobSet. Printed: both, and the ratio.

With `--kwok-pods N` (N > 0) also on the full local cluster with kwok nodes (no containers:
envtest/agents.py runs one agent host process per pod and restarts it as the kubelet would):
InPlaceRestart from one agent's failure to `currentInPlaceRestartAttempt` advancing (every agent
then lifts its barrier at once), Recreate from one pod's failure (kwok's fail-exit-code) to every
pod of the new attempt Running. On this machine the in-place figure is dominated by starting N
agent processes on shared cores, which real nodes do in parallel.

Run (root; hack/node-packages.sh): JOBSET_K8S_BIN=... .venv/bin/python hack/bench/restart_bench.py
     [--pods 4] [--rounds 3] [--kwok-pods 64] [--skip-node]
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

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
)
from jobset_controller_dev.envtest.realnode import RealNode, real_node, unavailable

ROOT = Path(__file__).resolve().parents[2]
RESTARTS_LABEL = "jobset.sigs.k8s.io/restart-attempt"
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


def image() -> tuple[str, list[Path]]:
    lines = subprocess.run(
        [str(ROOT / "hack" / "image.sh")], capture_output=True, text=True, check=True
    ).stdout.split()
    return lines[-1], [Path(lines[-3]), Path(lines[-2])]


def wait(check: Callable[[], Any], what: str, within: float = 300) -> Any:
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"restart_bench: {what}: not within {within:g} s")
        time.sleep(0.02)  # a poll interval: the figure's resolution


def manifest(strategy: str, image_name: str, pods: int, trigger_dir: str) -> dict[str, Any]:
    in_place = strategy == "InPlaceRestart"
    worker: dict[str, Any] = {
        "name": "worker",
        "image": image_name,
        "imagePullPolicy": "Never",
        "command": [PY, "-c", WORKER],
        "env": [{"name": "JOB_INDEX", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}}],
        "volumeMounts": [{"name": "trigger", "mountPath": "/trigger"}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [worker],
        "volumes": [{"name": "trigger", "hostPath": {"path": trigger_dir, "type": "Directory"}}],
    }
    job: dict[str, Any] = {"parallelism": 1, "completions": 1, "template": {"spec": pod}}
    if in_place:
        worker.update(restartPolicy="Never", restartPolicyRules=restart_all_on_failure())
        pod["serviceAccountName"] = "in-place-restart-agent"
        pod["initContainers"] = [agent_sidecar(image_name)]
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


def all_started_after(log: Path, since: float, pods: int) -> float | None:
    """The last of the first starts of every index after `since`, or None while one is missing."""
    first: dict[int, float] = {}
    for index, stamp in starts(log):
        if stamp > since and index not in first:
            first[index] = stamp
    return max(first.values()) if len(first) == pods else None


def measure(node: RealNode, strategy: str, image_name: str, pods: int, rounds: int) -> list[float]:
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
        manifest(strategy, image_name, pods, inside),
    )
    if status != 201:
        raise SystemExit(f"restart_bench: JobSet refused: {body}")
    wait(lambda: all_started_after(log, 0, pods), f"{strategy}: every worker started")
    figures = []
    for _ in range(rounds):
        began = time.time()
        (host_dir / "fail-0").write_text("")
        last = wait(
            lambda since=began: all_started_after(log, since, pods),
            f"{strategy}: every worker running again",
        )
        figures.append(last - began)
        print(f"  {strategy}: {last - began:.2f} s", file=sys.stderr)
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
            when = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
            when += float("0" + stamp[19:-1]) if stamp[19:-1] else 0.0
            if when >= began - 0.5:
                events.append((when - began, f"{name[-5:]} agent: {rest[:60]}"))
    for index, stamp in starts(log):
        if stamp > began:
            events.append((stamp - began, f"worker {index} started"))
    print("  timeline of the last InPlaceRestart round (s after the failure):", file=sys.stderr)
    for offset, what in sorted(events):
        print(f"    {offset:6.2f}  {what}", file=sys.stderr)


def kwok_measure(pods: int) -> dict[str, float]:
    """Both strategies on kwok nodes (module docstring); seconds per strategy."""
    return asyncio.run(_kwok(pods))


def kwok_manifest(strategy: str, pods: int) -> dict[str, Any]:
    in_place = strategy == "InPlaceRestart"
    job: dict[str, Any] = {
        "parallelism": 8,
        "completions": 8,
        "template": {
            "metadata": {"annotations": {RUN_FOREVER_ANNOTATION: "true"}},
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


async def _until(check: Callable[[], Any], what: str, within: float = 600) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"restart_bench: {what}: not within {within:g} s")
        await asyncio.sleep(0.05)  # a poll interval: the figure's resolution


async def _kwok(pods: int) -> dict[str, float]:
    cluster = FullCluster(pod_run_duration=3600).start()
    controller = _controller(cluster)
    client = await KubeClient.connect(kubeconfig=str(cluster.kubeconfig))
    results: dict[str, float] = {}
    try:
        for strategy in ("InPlaceRestart", "Recreate"):
            namespace = cluster.create_namespace(f"bench-{strategy.lower()}")
            jobsets = JOBSETS.format(namespace=namespace)
            await client.create(jobsets, kwok_manifest(strategy, pods))
            pod_path = f"/api/v1/namespaces/{namespace}/pods"

            async def status(path: str = jobsets) -> dict[str, Any]:
                return dict((await client.get(path + "/bench")).get("status") or {})

            async def running(attempt: str, path: str = pod_path) -> bool:
                items = (await client.get(path, labelSelector=f"{RESTARTS_LABEL}={attempt}"))[
                    "items"
                ]
                up = [p for p in items if p["status"].get("phase") == "Running"]
                return len(up) == pods

            if strategy == "InPlaceRestart":
                host = HostKubelet(client, namespace, cluster.kubeconfig, cluster.workdir, "bench")
                host.run()
                try:

                    async def current(value: int) -> bool:
                        return (await status()).get("currentInPlaceRestartAttempt") == value

                    await _until(lambda: current(0), "every agent at attempt 0")
                    began = time.monotonic()
                    await host.kill(sorted(host.agents)[0])
                    await _until(lambda: current(1), "every agent at attempt 1")
                    results[strategy] = time.monotonic() - began
                finally:
                    await host.close()
            else:
                await _until(lambda: running("0"), "every pod Running")
                victim = (await client.get(pod_path))["items"][0]["metadata"]["name"]
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
                await _until(lambda: running("1"), "every pod of the new attempt Running")
                results[strategy] = time.monotonic() - began
            print(f"  kwok {strategy}: {results[strategy]:.2f} s", file=sys.stderr)
            cluster.delete_namespace(namespace)
    finally:
        await client.close()
        controller.stop(60)
        cluster.stop()
    return results


def _controller(cluster: Any) -> ControllerProcess:
    """`jobset-controller run` with the InPlaceRestart gate against `cluster`, ready."""
    return start_local_controller(
        workdir=cluster.workdir,
        ca=cluster.ca,
        kubeconfig=cluster.kubeconfig,
        stem="bench",
        sections=IN_PLACE_RESTART_GATE,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kwok-pods", type=int, default=0, help="a multiple of 8; 0 skips kwok")
    parser.add_argument("--skip-node", action="store_true", help="kwok only")
    args = parser.parse_args()
    if args.kwok_pods:
        kwok = kwok_measure(args.kwok_pods)
        ratio = kwok["Recreate"] / kwok["InPlaceRestart"]
        print(f"kwok, {args.kwok_pods} pods (agents as host processes):")
        print(f"  InPlaceRestart  {kwok['InPlaceRestart']:6.2f} s")
        print(f"  Recreate        {kwok['Recreate']:6.2f} s")
        print(f"  Recreate / InPlaceRestart = {ratio:.1f}x")
    if args.skip_node:
        return 0
    why = unavailable()
    if why is not None:
        print(f"restart_bench: the real node cannot run here: {why}", file=sys.stderr)
        return 2
    image_name, archives = image()
    with real_node(archives) as node:
        controller = _controller(node.cluster)
        try:
            results = {
                strategy: measure(node, strategy, image_name, args.pods, args.rounds)
                for strategy in ("InPlaceRestart", "Recreate")
            }
        finally:
            controller.stop(60)
    in_place = statistics.median(results["InPlaceRestart"])
    recreate = statistics.median(results["Recreate"])
    print(f"real node, {args.pods} pods, median of {args.rounds}:")
    print(f"  InPlaceRestart  {in_place:6.2f} s  (all: {results['InPlaceRestart']})")
    print(f"  Recreate        {recreate:6.2f} s  (all: {results['Recreate']})")
    print(f"  Recreate / InPlaceRestart = {recreate / in_place:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
