"""Benchmark: controller memory at the pod counts of the largest clusters, ours against upstream
v0.12.0 on the same pods (issue 45; numbers and ratios, no pass/fail).

Why: upstream's users report about 1 MB of controller memory per JobSet pod (8 GiB at about 10k
pods; kubernetes-sigs/jobset#1055: two pod informers holding whole pods), and deployers size the
controller by the node. Our pod caches keep a trimmed pod; this measures what that is worth at
10,000 and 50,000 pods.

One full cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) holds
racks of `--rack-nodes` kwok nodes, one rack per Job (exclusive placement: the
`alpha.jobset.sigs.k8s.io/exclusive-topology` annotation on every JobSet, leader/follower through
the pod webhooks). JobSets of `--jobs` Jobs x `--pods-per-job` pods arrive in steps of `--step`
pods; every pod is a training pod as such pods are stored (`training_pod`: 30 env vars, 4 volumes
with mounts, requests and limits, annotations; about 7 KB each as stored) that kwok keeps
Running. Both controllers run with the InPlaceRestart gate on, so every pod cache each one has is
live (ours: the placement cache and the in-place cache of one watch; upstream: its pod
informers).

After each step: a populating controller (ours, pod webhooks registered to it) creates the
Jobs, kube-controller-manager the pods, the scheduler binds them; once every pod is ready
(the Jobs' `status.ready`) the populator stops. Then each side in turn is started fresh on
that cluster, with the pod webhooks registered to it, and measured from outside until it is
quiet: seconds to /readyz, CPU seconds from start to quiet (its initial sync of every pod,
JobSet and Job), VmRSS when quiet and VmHWM (the peak: the initial list), API requests
(rest_client_requests_total). The cluster's own processes' RSS is recorded at each checkpoint.

A side whose VmHWM passes `--memory-bound` GiB, or when the machine has less than
`--min-available` GiB available, is measured no further: its figures at the larger counts are
the least-squares line through its checkpoints (from two on), marked `extrapolated`. The
cluster itself stops the run where it no longer fits (the printed table holds what was
measured).

Run: JOBSET_K8S_BIN=... .venv/bin/python hack/bench/pod_scale_bench.py
     [--pods 10000 50000] [--step 10000] [--jobs 10] [--pods-per-job 100] [--rack-nodes 4]
     [--sides ours upstream] [--memory-bound 8] [--min-available 3] [--workdir DIR]
     [--dev-venv]

Ours runs in a virtualenv with the runtime dependencies only (runtime_venv.py), as in the image.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import Controller, RawClient
from runtime_venv import add_venv_option, ours_python
from upstreamlib import UpstreamController, scraper_token

from jobset_controller.api.constants import EXCLUSIVE_KEY
from jobset_controller.api.defaults import default_jobset
from jobset_controller.api.types import JobSet
from jobset_controller.webhook.pods import MUTATE_POD_PATH, VALIDATE_POD_PATH
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import RUN_FOREVER_ANNOTATION
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import RACK_LABEL, NodeSpec
from jobset_controller_dev.envtest.processes import process_peak_rss, process_rss
from jobset_controller_dev.envtest.upstream import ensure_upstream
from jobset_controller_dev.envtest.webhooks import (
    MUTATING,
    VALIDATING,
    pod_webhook_configuration,
)

NAMESPACE = "pods"
SIDES = ("ours", "upstream")
MUTATING_NAME = "jobset-mutating-webhook-configuration"
VALIDATING_NAME = "jobset-validating-webhook-configuration"
GATES = {"InPlaceRestart": True}
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
MIB = 2**20


def training_pod() -> dict[str, Any]:
    """A training pod as large clusters run them: 30 env vars, 4 volumes with mounts, requests
    and limits, a few annotations (about 7 KB per pod as stored, with what the Job controller,
    the webhooks and the scheduler add)."""
    env: list[dict[str, Any]] = [
        {"name": f"TRAINING_SETTING_{i:02d}", "value": f"value-{i:02d}-" + "x" * 24}
        for i in range(26)
    ]
    env += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {
            "name": "JOB_INDEX",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                }
            },
        },
    ]
    mounts = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "checkpoints", "mountPath": "/checkpoints"},
        {"name": "config", "mountPath": "/etc/training", "readOnly": True},
        {"name": "credentials", "mountPath": "/var/run/credentials", "readOnly": True},
    ]
    container = {
        "name": "trainer",
        "image": "registry.example/training/trainer:2026.11.28-cuda12",
        "command": ["python", "-m", "trainer.main"],
        "args": ["--config=/etc/training/config.yaml", "--checkpoint-dir=/checkpoints"],
        "env": env,
        "ports": [{"name": "coordinator", "containerPort": 8476}],
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "200m", "memory": "256Mi"},
        },
        "volumeMounts": mounts,
    }
    return {
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "checkpoints", "emptyDir": {}},
            {"name": "config", "configMap": {"name": "training-config", "optional": True}},
            {"name": "credentials", "secret": {"secretName": "training-creds", "optional": True}},
        ],
        "terminationGracePeriodSeconds": 30,
    }


def manifest(name: str, jobs: int, pods: int) -> dict[str, Any]:
    """One JobSet, already defaulted as the JobSet webhook would (no JobSet webhook is
    registered here)."""
    workers = replicated_job(
        "w",
        jobs,
        pods=pods,
        backoff_limit=0,
        containers=training_pod()["containers"],
        annotations={
            RUN_FOREVER_ANNOTATION: "true",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9090",
            "training.example/run": name,
        },
        pod_spec={k: v for k, v in training_pod().items() if k != "containers"},
    )
    body = jobset_manifest(name, replicated_jobs=[workers], annotations={EXCLUSIVE_KEY: RACK_LABEL})
    body["spec"] = default_jobset(JobSet.model_validate(body)).to_dict()["spec"]
    return body


def rack_nodes(racks: int, per_rack: int, pods_per_job: int) -> list[NodeSpec]:
    """`racks` racks of `per_rack` nodes with room for one Job's pods (and a few more)."""
    capacity = math.ceil(pods_per_job / per_rack) + 4
    return [
        NodeSpec(
            name=f"rack-{r}-node-{n}",
            labels={RACK_LABEL: f"rack-{r}"},
            pods=capacity,
            cpu=str(capacity),
            memory=f"{capacity}Gi",
            gpus=0,
        )
        for r in range(racks)
        for n in range(per_rack)
    ]


@dataclass
class Point:
    """One side measured at one pod count."""

    side: str
    pods: int
    ready_s: float = 0.0
    cpu_s: float = 0.0
    rss: int = 0  # VmRSS when quiet
    peak: int = 0  # VmHWM
    requests: float = 0.0
    extrapolated: bool = False


@dataclass
class Checkpoint:
    pods: int
    populate_s: float
    components: dict[str, int] = field(default_factory=dict)  # name -> RSS bytes
    available: int = 0


def available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def register_pod_webhooks(cluster: FullCluster, port: int) -> None:
    """The two pod webhooks, by URL, to the controller listening on `port` (replacing any)."""
    base = f"https://127.0.0.1:{port}"
    for path, name, webhook, url in (
        (MUTATING, MUTATING_NAME, "mpod.kb.io", base + MUTATE_POD_PATH),
        (VALIDATING, VALIDATING_NAME, "vpod.kb.io", base + VALIDATE_POD_PATH),
    ):
        cluster.request("DELETE", f"{path}/{name}")
        status, reply = cluster.request(
            "POST", path, pod_webhook_configuration(name, webhook, url, cluster.ca.cert_pem)
        )
        assert status == 201, reply


async def ready_pods(raw: RawClient) -> int:
    """Pods ready, summed over the Jobs' `status.ready` (500 Jobs listed, not 50,000 pods)."""
    status, body = await raw.request("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")
    assert status == 200, body
    return sum(int((job.get("status") or {}).get("ready") or 0) for job in body["items"])


class Bench:
    def __init__(self, args: argparse.Namespace, cluster: FullCluster, workdir: Path) -> None:
        self.args, self.cluster, self.workdir = args, cluster, workdir
        self.certs = workdir / "webhook-certs"
        cluster.ca.write_pair(
            self.certs, "pod-scale-webhook", common_name="webhook",
            ip_addresses=("127.0.0.1",), server=True,
        )  # fmt: skip
        self.config = "featureGates:\n" + "".join(
            f"  {gate}: {str(on).lower()}\n" for gate, on in GATES.items()
        )
        self.token = scraper_token(cluster, workdir) if "upstream" in args.sides else ""
        self.upstream_bin = ensure_upstream() if "upstream" in args.sides else None
        self.src = Path(__file__).resolve().parents[2] / "src"
        self.created = 0

    def ours(self, label: str) -> Controller:
        return Controller(
            label, self.src, self.cluster, self.workdir,
            config=self.config, webhook_certs=self.certs, python=self.args.python,
        )  # fmt: skip

    def upstream(self) -> Controller:
        assert self.upstream_bin is not None
        return UpstreamController(
            "upstream", self.upstream_bin, self.cluster, self.workdir, token=self.token,
            webhook_certs=self.certs, feature_gates=GATES,
        )  # fmt: skip

    async def populate(self, raw: RawClient, target: int) -> float:
        """JobSets until `target` pods exist, with ours creating the Jobs and placing the pods;
        seconds until every pod is ready."""
        began = time.monotonic()
        populator = self.ours("populator")
        # Registered before the start, so that the controller finds its webhooks and places
        # by leader and followers from its first Job on.
        register_pod_webhooks(self.cluster, populator.webhook_port)
        await populator.start(limit=1800)
        try:
            per_jobset = self.args.jobs * self.args.pods_per_job
            while self.created + per_jobset <= target:
                name = f"train-{self.created // per_jobset:04d}"
                body = manifest(name, self.args.jobs, self.args.pods_per_job)
                status, reply = await raw.request(
                    "POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets", body
                )
                assert status == 201, reply
                self.created += per_jobset
            while (ready := await ready_pods(raw)) < self.created:
                print(f"  {ready} of {self.created} pods ready", file=sys.stderr, flush=True)
                await asyncio.sleep(10)  # poll period of the population's progress
        finally:
            await populator.stop()
        return time.monotonic() - began

    async def measure(self, side: str, pods: int) -> Point:
        controller = self.ours("ours") if side == "ours" else self.upstream()
        point = Point(side, pods)
        register_pod_webhooks(self.cluster, controller.webhook_port)
        point.ready_s = await controller.start(limit=1800)
        try:
            point.cpu_s = await controller.settle(quiet=2.0, limit=1800)
            point.rss = process_rss(controller.pid)
            point.peak = process_peak_rss(controller.pid)
            point.requests = sum(
                v for k, v in (await controller.requests()).items() if not k.startswith("code:")
            )
        finally:
            await controller.stop()
        return point


def line_through(points: list[Point], attribute: str, pods: int) -> float:
    """Least-squares line through (pods, attribute) of `points`, at `pods`."""
    xs = [float(p.pods) for p in points]
    ys = [float(getattr(p, attribute)) for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return mean_y + slope * (pods - mean_x)


def extrapolate(points: list[Point], side: str, pods: int) -> Point | None:
    measured = [p for p in points if p.side == side and not p.extrapolated]
    if len(measured) < 2:
        return None
    out = Point(side, pods, extrapolated=True)
    for attribute in ("ready_s", "cpu_s", "requests"):
        setattr(out, attribute, line_through(measured, attribute, pods))
    for attribute in ("rss", "peak"):
        setattr(out, attribute, int(line_through(measured, attribute, pods)))
    return out


def print_table(
    points: list[Point], checkpoints: list[Checkpoint], args: argparse.Namespace
) -> None:
    load = os.getloadavg()
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at the end "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; JobSets of {args.jobs} Jobs x "
        f"{args.pods_per_job} pods, racks of {args.rack_nodes} nodes, InPlaceRestart on\n"
    )
    print("| pods | side | s to ready | CPU s to quiet | VmRSS MiB | VmHWM MiB | API requests |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for p in sorted(points, key=lambda p: (p.pods, p.side)):
        mark = " (extrapolated)" if p.extrapolated else ""
        print(f"| {p.pods} | {p.side}{mark} | {p.ready_s:.1f} | {p.cpu_s:.1f} | "
              f"{p.rss / MIB:.0f} | {p.peak / MIB:.0f} | {p.requests:.0f} |")  # fmt: skip
    by = {(p.pods, p.side): p for p in points}
    print()
    for pods in sorted({p.pods for p in points}):
        mine, theirs = by.get((pods, "ours")), by.get((pods, "upstream"))
        if mine and theirs and theirs.rss and theirs.peak:
            print(f"{pods} pods: ours / upstream VmRSS {mine.rss / theirs.rss:.2f}x, "
                  f"VmHWM {mine.peak / theirs.peak:.2f}x")  # fmt: skip
    print("\nthe cluster at each checkpoint (RSS MiB; s to populate the step):\n")
    print("| pods | s | " + " | ".join(COMPONENTS) + " | machine available GiB |")
    print("|---:|---:|" + "---:|" * len(COMPONENTS) + "---:|")
    for c in checkpoints:
        rss = " | ".join(f"{c.components.get(name, 0) / MIB:.0f}" for name in COMPONENTS)
        print(f"| {c.pods} | {c.populate_s:.0f} | {rss} | {c.available / 2**30:.1f} |")


async def run(args: argparse.Namespace, cluster: FullCluster, workdir: Path) -> None:
    bench = Bench(args, cluster, workdir)
    cluster.create_namespace(NAMESPACE)
    raw = RawClient(cluster)
    points: list[Point] = []
    checkpoints: list[Checkpoint] = []
    stopped: set[str] = set()
    targets = list(range(args.step, max(args.pods) + 1, args.step))
    try:
        for target in targets:
            took = await bench.populate(raw, target)
            checkpoint = Checkpoint(target, took, available=available_memory())
            for process in cluster.component_processes():
                if process.pid is not None:
                    checkpoint.components[process.name] = process_rss(process.pid)
            checkpoints.append(checkpoint)
            print(f"{target} pods ready after {took:.0f} s", file=sys.stderr, flush=True)
            for side in args.sides:
                if side in stopped:
                    point = extrapolate(points, side, target)
                    if point is not None:
                        points.append(point)
                    continue
                point = await bench.measure(side, target)
                points.append(point)
                print(f"  {side}: VmRSS {point.rss / MIB:.0f} MiB, VmHWM "
                      f"{point.peak / MIB:.0f} MiB, CPU {point.cpu_s:.1f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
                if point.peak > args.memory_bound * 2**30:
                    stopped.add(side)
            if available_memory() < args.min_available * 2**30:
                print("the machine is out of memory for a larger step", file=sys.stderr)
                for pods in (p for p in args.pods if p > target):
                    for side in args.sides:
                        point = extrapolate(points, side, pods)
                        if point is not None:
                            points.append(point)
                break
    finally:
        await raw.close()
        print_table([p for p in points if p.pods in args.pods or not p.extrapolated],
                    checkpoints, args)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[10000, 50000])
    parser.add_argument("--step", type=int, default=10000)
    parser.add_argument("--jobs", type=int, default=10, help="Jobs per JobSet")
    parser.add_argument("--pods-per-job", type=int, default=100)
    parser.add_argument("--rack-nodes", type=int, default=4)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--memory-bound", type=float, default=8.0, help="GiB of a side's VmHWM")
    parser.add_argument("--min-available", type=float, default=3.0, help="GiB")
    parser.add_argument("--workdir", type=Path)
    add_venv_option(parser)
    args = parser.parse_args()
    # The image's environment: the development venv's test tools change what ours imports and
    # holds (structlog loads `rich` when installed: about 6 MiB of a start), see runtime_venv.py.
    args.python = ours_python(args)
    per_jobset = args.jobs * args.pods_per_job
    if args.step % per_jobset or any(p % args.step for p in args.pods):
        parser.error(f"--step must be a multiple of {per_jobset}, --pods of --step")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pod-scale-"))
    racks = max(args.pods) // args.pods_per_job + 2  # one per Job, and two to spare
    nodes = rack_nodes(racks, args.rack_nodes, args.pods_per_job)
    lease = 600 if len(nodes) > 1000 else 40
    began = time.monotonic()
    cluster = FullCluster(
        nodes=nodes, workdir=workdir / "cluster", node_lease_seconds=lease
    ).start()
    print(f"cluster with {len(nodes)} kwok nodes in {racks} racks up in "
          f"{time.monotonic() - began:.0f} s; logs under {workdir}", file=sys.stderr)  # fmt: skip
    try:
        asyncio.run(run(args, cluster, workdir))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
