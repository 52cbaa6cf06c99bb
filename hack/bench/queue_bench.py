"""Benchmark: the cost of a queue of N suspended JobSets, ours with deferred children against
upstream v0.12.0, which creates every child (`scale_bench.py --queue`).

Why: a JobSet queued by Kueue waits suspended; upstream's controller gives it its suspended Jobs
and headless Service at once, so a queue of N JobSets of R replicas holds (R + 2) N objects in
etcd and in every Job informer of the cluster. Ours with the Configuration's
`deferredChildren.enable` holds N (docs/behaviour.md#deferred-children). At N = 50,000 upstream's
side does not fit the 2-core, 24 GiB machine (about 5 GiB of the cluster's processes per
10,000 JobSets of 4 Jobs); ours does.

Each side on a fresh full cluster (kube-controller-manager's Job controller, scheduler, kwok
nodes), its controller a process of its own, run the same way: the queue is built in batches of
`--step` JobSets (POSTed by a raw client, `--in-flight` at a time, already defaulted as the
webhook would: no webhook is registered, and upstream's reconciler dereferences defaults it
expects the webhook to have set); after each batch the bench waits until the controller's
children exist (upstream: R Jobs per JobSet) and every writer is quiet (the controller, then the
API server and etcd), and records a checkpoint: objects in the API server (JobSets, Jobs,
Services), etcd's database size, the RSS of kube-apiserver, etcd, kube-controller-manager (its
Job informer) and the JobSet controller, the controller's CPU, and the time so far (each batch
from its first POST to quiet; summed). A side stops at `--jobsets`, or (upstream and ours-off, which
create every child) at the first checkpoint where its cluster's processes (etcd,
kube-apiserver, kube-controller-manager, the controller) hold more than `--memory-bound` GiB
together (from the second checkpoint on: a line needs two points), or the machine has less
than `--min-available`
GiB available: the stated memory bound. Then one JobSet is admitted (`suspend: false`, as Kueue
does) and timed until all its pods run.

`--sides` upstream ours (the default; `ours upstream` runs ours first) compares upstream's
controller (hack/upstream-jobset.sh) with ours, deferred children on. A side stopped by the
bound is extrapolated to `--jobsets`: each figure by the least-squares line through its
checkpoints from the second half of the run on (the slope per 10,000 JobSets is printed), and
marked so; the admission is measured at the largest N reached, not extrapolated. `ours-off`
runs ours with the option off (upstream's behaviour by our controller, the figures of the first
version of this bench).

Run: JOBSET_K8S_BIN=... .venv/bin/python hack/bench/scale_bench.py --queue --jobsets 50000
     [--queue-replicas 4] [--step 5000] [--sides upstream ours] [--memory-bound 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from benchlib import Controller, RawClient, count, wait_count
from cpu_bench import JOBS, JOBSETS
from upstreamlib import UpstreamController

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.api.defaults import default_jobset
from jobset_controller.api.types import JobSet
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.processes import process_cpu
from jobset_controller_dev.envtest.upstream import ensure_upstream

KWOK_RUN_FOREVER = "kwok.jobset.test/run-forever"
SERVICES = "/api/v1/namespaces/{ns}/services"
PODS = "/api/v1/namespaces/{ns}/pods"
NAMESPACE = "queue"
SIDES = ("upstream", "ours", "ours-off")
# The sides `--memory-bound` stops: those that create every child, which is what does not fit.
# Ours with deferred children runs whole (a first run stopped it at 45,000 of 50,000, its
# kube-apiserver alone holding 3.8 GiB), stopped only by `--min-available`.
BOUNDED = ("upstream", "ours-off")
# The processes whose RSS the memory bound counts: the cluster's and the controller's.
HELD = ("apiserver", "etcd", "controller_manager", "controller")
# The controller's memory with deferred children against upstream's, which caches every child.
RSS_GOAL = 0.15
LABELS = {
    "upstream": "upstream v0.12.0 (creates every child)",
    "ours": "ours, deferredChildren on",
    "ours-off": "ours, deferredChildren off",
}
# The figures of a checkpoint that grow with N (extrapolated for a side stopped by the bound).
GROWING = (
    ("objects", "objects in the API server (JobSets + Jobs + Services)", "{:,.0f}"),
    ("jobs", "of which Jobs", "{:,.0f}"),
    ("services", "of which Services", "{:,.0f}"),
    ("etcd_db_mib", "etcd database size, MiB", "{:,.0f}"),
    ("apiserver_rss_mib", "kube-apiserver RSS, MiB", "{:,.0f}"),
    ("etcd_rss_mib", "etcd RSS, MiB", "{:,.0f}"),
    ("controller_manager_rss_mib", "kube-controller-manager RSS, MiB", "{:,.0f}"),
    ("controller_rss_mib", "JobSet controller RSS, MiB", "{:,.0f}"),
    ("controller_cpu_s", "JobSet controller CPU to build the queue, s", "{:,.1f}"),
    ("elapsed_s", "queue built, every writer quiet, s", "{:,.0f}"),
)


@dataclass
class Side:
    """One side's checkpoints, why it stopped and its admission."""

    name: str
    target: int
    checkpoints: list[dict[str, float]] = field(default_factory=list)
    stopped: str = ""  # why it stopped before the target ("" when it reached it)
    admission_s: float = 0.0
    admission_at: int = 0
    loads: list[float] = field(default_factory=list)

    @property
    def reached(self) -> int:
        return int(self.checkpoints[-1]["jobsets"]) if self.checkpoints else 0

    def at_target(self, key: str) -> tuple[float, bool, float]:
        """(value at the target, extrapolated?, slope per 10,000 JobSets)."""
        points = [(c["jobsets"], c[key]) for c in self.checkpoints]
        if self.reached >= self.target:
            return points[-1][1], False, slope(points[len(points) // 2 :]) * 10_000
        fitted = points[len(points) // 2 :] if len(points) >= 4 else points
        rate = slope(fitted)
        last_n, last_value = points[-1]
        return last_value + rate * (self.target - last_n), True, rate * 10_000


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope through the points (0 with fewer than two)."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0


def queued_body(replicas: int) -> dict[str, Any]:
    """A JobSet as Kueue holds it in a queue, defaulted as the webhook would: suspended;
    `replicas` Jobs of one pod each, whose pods run until deleted once admitted (kwok)."""
    workers = replicated_job(
        "workers", replicas, backoff_limit=0, annotations={KWOK_RUN_FOREVER: "true"}
    )
    manifest = jobset_manifest("template", replicated_jobs=[workers], suspend=True)
    manifest["spec"] = default_jobset(JobSet.model_validate(manifest)).to_dict()["spec"]
    return manifest


def rss_mib(pid: int | None) -> float:
    """Resident memory of a process, MiB (0 when unknown)."""
    if not pid:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def etcd_db_bytes(cluster: FullCluster) -> tuple[float, float]:
    """etcd's database file size and the part of it in use, from its /metrics."""
    with urllib.request.urlopen(f"{cluster.etcd_endpoint}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    sizes = {}
    for line in text.splitlines():
        for name in ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes"):
            if line.startswith(name + " "):
                sizes[name] = float(line.split()[1])
    return (
        sizes["etcd_mvcc_db_total_size_in_bytes"],
        sizes["etcd_mvcc_db_total_size_in_use_in_bytes"],
    )


def cluster_pids(cluster: FullCluster) -> dict[str, int]:
    out = {}
    for name, proc in (
        ("apiserver", cluster.apiserver),
        ("etcd", cluster.etcd),
        ("controller_manager", cluster.controller_manager),
    ):
        if proc is not None and proc.pid:
            out[name] = proc.pid
    return out


async def quiet_cluster(cluster: FullCluster, limit: float = 3600.0) -> None:
    """Until the API server and etcd used under 10% of a core for 3 s twice in a row: every
    writer (the controller, the Job controller) is done with the batch."""
    pids = [pid for name, pid in cluster_pids(cluster).items() if name != "controller_manager"]
    deadline = time.perf_counter() + limit
    calm, last = 0, sum(process_cpu(p) for p in pids)
    while calm < 2:
        await asyncio.sleep(3.0)
        now = sum(process_cpu(p) for p in pids)
        calm = calm + 1 if now - last < 0.3 else 0
        last = now
        if time.perf_counter() > deadline:
            raise TimeoutError("the cluster never went quiet")


async def pods_running(raw: RawClient, jobset_name: str, want: int) -> bool:
    selector = f"{JOBSET_NAME_KEY}%3D{jobset_name}"
    status, body = await raw.request("GET", f"{PODS.format(ns=NAMESPACE)}?labelSelector={selector}")
    assert status == 200, body
    phases = [(p.get("status") or {}).get("phase") for p in body.get("items") or ()]
    return phases.count("Running") == want


def controller_for(side: str, cluster: FullCluster, tmp: Path, args: argparse.Namespace) -> Any:
    if side == "upstream":
        # No /metrics scrape here (RSS and CPU come from /proc): no token needed.
        return UpstreamController("queue-upstream", ensure_upstream(), cluster, tmp, token="")
    enable = "true" if side == "ours" else "false"
    config = f"deferredChildren:\n  enable: {enable}\n"
    return Controller(f"queue-{side}", Path(args.src), cluster, tmp, config=config)


async def run_side(side: str, args: argparse.Namespace, tmp: Path) -> Side:
    """Build the queue in batches on a fresh cluster (module docstring); one admission."""
    out = Side(side, args.jobsets)
    cluster = FullCluster(keep_workdir=False).start()
    raw = RawClient(cluster, limit=args.in_flight)
    controller = controller_for(side, cluster, tmp, args)
    replicas = args.queue_replicas
    template = queued_body(replicas)
    path = JOBSETS.format(ns=NAMESPACE)
    try:
        await controller.start(limit=600)
        await raw.ensure_namespace(NAMESPACE)
        elapsed, posted = 0.0, 0
        while posted < args.jobsets:
            batch = range(posted, min(posted + args.step, args.jobsets))
            out.loads.append(os.getloadavg()[0])
            began = time.perf_counter()
            bodies = []
            for index in batch:
                template["metadata"]["name"] = f"js-{index}"
                bodies.append((path, orjson.dumps(template)))
            codes = await raw.many("POST", bodies, in_flight=args.in_flight)
            assert set(codes) == {201}, codes
            posted = batch.stop
            if side != "ours":
                await wait_count(raw, JOBS.format(ns=NAMESPACE), replicas * posted)
            await controller.settle(quiet=2.0, limit=3600)
            await quiet_cluster(cluster)
            elapsed += time.perf_counter() - began
            point = await checkpoint(cluster, raw, controller, posted, elapsed)
            out.checkpoints.append(point)
            print(f"  {side}: {show(point)}; load {os.getloadavg()[0]:.1f}", flush=True)
            held = sum(point[f"{name}_rss_mib"] for name in HELD)
            if (
                side in BOUNDED
                and posted < args.jobsets
                and held / 1024 > args.memory_bound
                and len(out.checkpoints) > 1
            ):
                out.stopped = (
                    f"stopped at {posted:,} JobSets: its cluster's processes held "
                    f"{held / 1024:.1f} GiB, above the bound of {args.memory_bound:g} GiB"
                )
            elif posted < args.jobsets and available_gib() < args.min_available:
                out.stopped = (
                    f"stopped at {posted:,} JobSets: the machine had {available_gib():.1f} GiB "
                    f"available, under the bound of {args.min_available:g} GiB"
                )
            if out.stopped:
                print(f"  {side}: {out.stopped}", flush=True)
                break
        out.admission_at = posted
        out.admission_s = await admit(raw, "js-0", replicas)
        print(f"  {side}: admission to running {out.admission_s:.2f} s", flush=True)
    finally:
        await controller.stop()
        await raw.close()
        cluster.stop()
    return out


async def checkpoint(
    cluster: FullCluster, raw: RawClient, controller: Any, posted: int, elapsed: float
) -> dict[str, float]:
    point: dict[str, float] = {"jobsets": float(posted), "elapsed_s": elapsed}
    point["jobsets_seen"] = await count(raw, JOBSETS.format(ns=NAMESPACE))
    point["jobs"] = await count(raw, JOBS.format(ns=NAMESPACE))
    point["services"] = await count(raw, SERVICES.format(ns=NAMESPACE))
    point["objects"] = point["jobsets_seen"] + point["jobs"] + point["services"]
    db, in_use = etcd_db_bytes(cluster)
    point["etcd_db_mib"], point["etcd_in_use_mib"] = db / 2**20, in_use / 2**20
    pids = cluster_pids(cluster)
    for name in ("apiserver", "etcd", "controller_manager"):
        point[f"{name}_rss_mib"] = rss_mib(pids.get(name))
    point["controller_rss_mib"] = controller.rss() / 2**20
    point["controller_cpu_s"] = controller.cpu()
    point["available_gib"] = available_gib()
    return point


def show(point: dict[str, float]) -> str:
    return (
        f"{point['jobsets']:,.0f} JobSets, {point['objects']:,.0f} objects, etcd "
        f"{point['etcd_db_mib']:,.0f} MiB, kube-apiserver {point['apiserver_rss_mib']:,.0f} MiB, "
        f"kcm {point['controller_manager_rss_mib']:,.0f} MiB, controller "
        f"{point['controller_rss_mib']:,.0f} MiB ({point['controller_cpu_s']:.1f} s CPU), "
        f"{point['elapsed_s']:,.0f} s, {point['available_gib']:.1f} GiB available"
    )


async def admit(raw: RawClient, name: str, replicas: int) -> float:
    """Admission of one JobSet (what Kueue does): suspend false; seconds until all its pods run."""
    path = JOBSETS.format(ns=NAMESPACE)
    started = time.perf_counter()
    status, body = await raw.request(
        "PATCH", f"{path}/{name}", {"spec": {"suspend": False}}, "application/merge-patch+json"
    )
    assert status == 200, body
    while not await pods_running(raw, name, replicas):
        if time.perf_counter() - started > 300:
            raise TimeoutError("the admitted JobSet's pods never all ran")
        await asyncio.sleep(0.05)
    return time.perf_counter() - started


def print_results(sides: list[Side], args: argparse.Namespace) -> None:
    n = args.jobsets
    # Upstream's side first, the base of the ratios, whichever side ran first.
    sides = sorted(sides, key=lambda side: side.name != "upstream")
    print(f"\nper checkpoint (JobSets of {args.queue_replicas} Jobs, batches of {args.step}):\n")
    for side in sides:
        print(f"{LABELS[side.name]}:")
        for point in side.checkpoints:
            print(f"  {show(point)}")
        if side.stopped:
            print(f"  {side.stopped}")
    print()
    headers = []
    for side in sides:
        label = LABELS[side.name]
        headers.append(f"{label}, {'extrapolated' if side.stopped else 'measured'} at {n:,}")
    ratio = len(sides) == 2 and sides[0].name == "upstream"
    print(f"| {n:,} suspended JobSets of {args.queue_replicas} Jobs | " + " | ".join(headers)
          + (f" | {sides[1].name} / upstream |" if ratio else " |"))  # fmt: skip
    print("|---|" + "---:|" * (len(sides) + ratio))
    for key, title, fmt in GROWING:
        cells, values = [], []
        for side in sides:
            value, extrapolated, _ = side.at_target(key)
            values.append(value)
            cells.append(fmt.format(value) + (" (extrapolated)" if extrapolated else ""))
        if ratio:
            cells.append(f"{values[1] / values[0]:.3f}x" if values[0] else "-")
        print(f"| {title} | " + " | ".join(cells) + " |")
    cells = [f"{s.admission_s:.2f} (at {s.admission_at:,})" for s in sides]
    if ratio:
        cells.append(f"{sides[1].admission_s / sides[0].admission_s:.2f}x")
    print("| admission to all pods of one JobSet running, s | " + " | ".join(cells) + " |")
    for side in sides:
        if side.stopped:
            print(f"\n{LABELS[side.name]}: {side.stopped}; the figures at {n:,} are the last "
                  f"checkpoint plus the least-squares slope (per 10,000 JobSets):")  # fmt: skip
            for key, title, fmt in GROWING:
                measured = side.checkpoints[-1][key]
                _, _, per = side.at_target(key)
                print(f"  {title}: {fmt.format(measured)} measured at {side.reached:,}, "
                      f"slope {fmt.format(per)} per 10,000")  # fmt: skip
    if ratio:
        ours, _, _ = sides[1].at_target("controller_rss_mib")
        theirs, extrapolated, _ = sides[0].at_target("controller_rss_mib")
        share = ours / theirs if theirs else float("inf")
        print(
            f"\ngoal: JobSet controller RSS <= {RSS_GOAL:g}x upstream's at {n:,}: "
            f"{share:.3f}x, {'met' if share <= RSS_GOAL else 'not met'}"
            + (" (upstream's side extrapolated)" if extrapolated else "")
        )
    loads = [load for side in sides for load in side.loads]
    print(f"\nload average (1 min) at the batches: {min(loads):.1f} - {max(loads):.1f}")


async def queue_compare(args: argparse.Namespace) -> None:
    sides = []
    with tempfile.TemporaryDirectory(prefix="queue-bench-") as tmp:
        for side in args.sides:
            sides.append(await run_side(side, args, Path(tmp)))
    print_results(sides, args)


def queue_options(parser: argparse.ArgumentParser) -> None:
    """The flags of `scale_bench.py --queue` (`--jobsets`, `--in-flight`, `--src` are shared)."""
    parser.add_argument("--queue-replicas", type=int, default=4)
    parser.add_argument("--step", type=int, default=5000, help="JobSets per batch (--queue)")
    parser.add_argument(
        "--sides", nargs="+", default=["upstream", "ours"], choices=SIDES,
        help="--queue: upstream's controller, ours with deferred children on, ours with it off",
    )  # fmt: skip
    parser.add_argument(
        "--memory-bound", type=float, default=10.0,
        help="--queue: GiB the cluster's processes may hold before upstream or ours-off stops",
    )  # fmt: skip
    parser.add_argument(
        "--min-available", type=float, default=4.0,
        help="--queue: GiB the machine must keep available, or a side stops (default 4)",
    )  # fmt: skip
