"""Benchmark: the in-place restart agent's start and memory (it runs in every pod of a JobSet).

For each `--src label=path` tree (our code at some commit: `git archive <commit> src | tar -x -C
/tmp/before` gives one), `--runs` times in turn against one real apiserver: a JobSet using
InPlaceRestart and a pod are created, the agent process of that tree is started as a sidecar, and
the bench reads (the agent runs in a venv of the runtime dependencies only, as the image's:
runtime_venv.py)

- start: seconds from exec to the pod's attempt annotation (interpreter start, imports, client,
  list and watch, the server-side apply);
- RSS at that moment (VmRSS);
- lift: seconds from the JobSet's status reaching the pod's attempt to the startup probe
  answering 200 (the watch event, the decision, the probe server starting);
- peak RSS once the probe has answered (VmHWM).

It prints the median of each per tree and, with two or more trees, the ratio of each tree to the
first. The trees' agents alternate run by run, so a slower stretch of the machine hits both.

Run: .venv/bin/python hack/bench/agent_bench.py --src after=src [--src before=/tmp/before/src]
     [--runs 9]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchlib import parse_src
from runtime_venv import runtime_python

from jobset_controller.agent import JOBSETS
from jobset_controller.api.constants import IN_PLACE_RESTART_ATTEMPT_KEY, JOBSET_NAME_KEY
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.resources import PODS
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.processes import free_port

NAMESPACE = "agent-bench"
AGENT_MAIN = "import sys; from jobset_controller.agent import main; sys.exit(main())"
POLL = 0.005


def jobset(name: str) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
    job = {"backoffLimit": 2**31 - 1, "podReplacementPolicy": "Failed", "template": {"spec": pod}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 3, "restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": job}}],
        },
    }


def pod(name: str, jobset_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {JOBSET_NAME_KEY: jobset_name}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def proc_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def probe(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/barrier-is-down", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


async def until(check: Any, what: str, limit: float = 60.0) -> float:
    """Poll `check` until true; the instant (monotonic) it was first seen true."""
    deadline = time.monotonic() + limit
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(POLL)
    return time.monotonic()


async def one_run(
    kube: KubeClient, plane: ControlPlane, python: Path, src: Path, name: str, workdir: Path
) -> dict[str, float]:
    await kube.create(JOBSETS.path(NAMESPACE), jobset(name))
    await kube.create(PODS.path(NAMESPACE), pod(name, name))
    namespace_file = workdir / "namespace"
    namespace_file.write_text(NAMESPACE)
    port = free_port()
    environ = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(src),
        "JOBSET_NAME": name,
        "POD_NAME": name,
        "STARTUP_PROBE_PORT": str(port),
    }
    began = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        str(python), "-c", AGENT_MAIN,
        "--kubeconfig", str(plane.kubeconfig), "--namespace-file", str(namespace_file),
        env=environ, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:

        async def annotated() -> bool:
            got = await kube.get(PODS.path(NAMESPACE, name))
            return IN_PLACE_RESTART_ATTEMPT_KEY in (got["metadata"].get("annotations") or {})

        at_annotation = await until(annotated, "the agent annotates its pod")
        rss = proc_kib(process.pid, "VmRSS")
        status_path = JOBSETS.path(NAMESPACE, name) + "/status"
        lifted_from = time.monotonic()
        await kube.merge_patch(status_path, {"status": {"currentInPlaceRestartAttempt": 0}})

        async def answering() -> bool:
            return await asyncio.to_thread(probe, port) == 200

        at_lift = await until(answering, "the barrier lifts")
        peak = proc_kib(process.pid, "VmHWM")
    finally:
        process.kill()
        await process.wait()
    return {
        "start s": at_annotation - began,
        "RSS MiB": rss / 1024,
        "lift s": at_lift - lifted_from,
        "peak MiB": peak / 1024,
    }


async def run(trees: list[tuple[str, Path]], runs: int) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {label: {} for label, _ in trees}
    python = runtime_python()
    with ControlPlane() as plane:
        plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        # No controller-manager here makes the namespace's default ServiceAccount: the pods'
        # admission needs it.
        accounts = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
        plane.request("POST", accounts, {"metadata": {"name": "default"}})
        kube = await KubeClient.connect(kubeconfig=str(plane.kubeconfig))
        try:
            for index in range(runs):
                for number, (label, src) in enumerate(trees):
                    figures = await one_run(
                        kube, plane, python, src, f"js-{index}-{number}", plane.workdir
                    )
                    for key, value in figures.items():
                        results[label].setdefault(key, []).append(value)
        finally:
            await kube.close()
    return results


def report(results: dict[str, dict[str, list[float]]], runs: int) -> None:
    labels = list(results)
    keys = list(results[labels[0]])
    print(f"agent start and memory, median of {runs} runs per tree")
    print(f"{'tree':<10}" + "".join(f"{key:>12}" for key in keys))
    medians = {
        label: {key: statistics.median(results[label][key]) for key in keys} for label in labels
    }
    for label in labels:
        print(f"{label:<10}" + "".join(f"{medians[label][key]:>12.3f}" for key in keys))
    for label in labels[1:]:
        ratios = "".join(f"{medians[label][k] / medians[labels[0]][k]:>12.2f}" for k in keys)
        print(f"{label + '/' + labels[0]:<10}" + ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], help="label=path of a src tree")
    parser.add_argument("--runs", type=int, default=9, help="agent starts per tree")
    args = parser.parse_args()
    trees = [
        (label, path.resolve()) for label, path in parse_src(args.src) or [("src", Path("src"))]
    ]
    report(asyncio.run(run(trees, args.runs)), args.runs)


if __name__ == "__main__":
    main()
