"""Benchmark: one controller holding many JobSets (numbers, no pass/fail).

Two populations, each built on one control plane and measured with a fresh controller process:

- `suspended`: N suspended JobSets of 1 replica (a deep Kueue queue; the controller still
  creates each one's suspended Job and headless Service);
- `running`:   N JobSets of 4 replicas (4N Jobs).

For each: the JobSets are POSTed by a raw client (`--in-flight` at a time); a first controller
creates the children and writes the statuses and is stopped once quiet; then a SECOND controller
is started and measured from outside (benchlib.Controller):

- start to /readyz (every informer listed: the initial sync) and to quiet (every key reconciled);
- requests it made while starting (a steady cluster needs no write);
- RSS at rest, and per cached JobSet / per cached Job: with both populations,
  per Job = (RSS_running - RSS_suspended) / 3N and per JobSet (with its Service) =
  (RSS_suspended - RSS_empty) / N - per Job;
- the worst event-loop lag from start to quiet (the loop-lag histogram's bucket bound, and the
  exact figure of any 'event loop was blocked' line, which is logged above 1 s);
- one change among N: a child Job deleted, seconds until the controller has recreated it;
- an idle minute (`--idle`): CPU seconds and writes.

Run: .venv/bin/python hack/bench/scale_bench.py [--jobsets 10000] [--populations suspended running]
     [--src path] [--idle 60]

`--queue [--queue-replicas 4]` measures instead what deferred children (the Configuration's
`deferredChildren.enable`, issue 27) save on a queue of N suspended JobSets: on a fresh full
cluster each (kube-controller-manager's Job controller, scheduler, kwok nodes), with the option
off then on: objects in the API server, etcd's database size, kube-apiserver's, the Job
controller's and our controller's RSS, the time until the queue is created and every writer
quiet, and the seconds from admitting one JobSet (`suspend: false`, as Kueue does) until all its
pods run. Prints both and the ratios.
Sizes the issue asks for: `--jobsets 50000 --populations suspended` and
`--jobsets 10000 --populations running`. On the 2-core machine the API server and etcd are the
limit while populating (about 5 minutes per 10,000 JobSets of 4 Jobs).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from benchlib import Controller, RawClient, process_cpu, worst_lag
from cpu_bench import JOBS, JOBSETS, jobset

from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job


async def count(raw: RawClient, path: str) -> int:
    """Objects in a collection, from one item and the server's remainingItemCount."""
    status, body = await raw.request("GET", f"{path}?limit=1")
    assert status == 200, body
    items = len(body.get("items") or ())
    return items + int((body.get("metadata") or {}).get("remainingItemCount") or 0)


async def wait_count(raw: RawClient, path: str, want: int, limit: float = 3600.0) -> float:
    started = time.perf_counter()
    while await count(raw, path) < want:
        if time.perf_counter() - started > limit:
            raise TimeoutError(f"{path}: fewer than {want}")
        await asyncio.sleep(1.0)
    return time.perf_counter() - started


def manifest(name: str, replicas: int, suspended: bool) -> dict[str, Any]:
    out = jobset(name, replicas)
    out["spec"]["suspend"] = suspended
    return out


async def measure(
    plane: ControlPlane, raw: RawClient, args: argparse.Namespace, tmp: Path, label: str, ns: str
) -> dict[str, float]:
    src = Path(args.src)
    controller = Controller(label, src, plane, tmp)
    out: dict[str, float] = {}
    out["ready_s"] = await controller.start(limit=1800)
    started = time.perf_counter() - out["ready_s"]
    out["ready_cpu_s"] = controller.cpu()
    await controller.settle(quiet=2.0, limit=3600)
    out["quiet_s"] = time.perf_counter() - started
    out["start_cpu_s"] = controller.cpu()
    requests = await controller.requests()
    out["start_writes"] = sum(requests.get(m, 0) for m in ("POST", "PUT", "PATCH", "DELETE"))
    out["start_lag_le_s"] = worst_lag({}, await controller.lag_buckets())
    out["start_lag_logged_s"] = max(controller.blocked_warnings(), default=0.0)
    await asyncio.sleep(5)
    out["rss_mib"] = controller.rss() / 2**20
    if ns:
        # One change among N: a child Job deleted; seconds until it is back.
        jobs = JOBS.format(ns=ns)
        status, body = await raw.request("GET", f"{jobs}?limit=1")
        name = body["items"][0]["metadata"]["name"]
        t0 = time.perf_counter()
        status, _ = await raw.request(
            "DELETE", f"{jobs}/{name}", {"propagationPolicy": "Background"}
        )
        assert status == 200, status
        while (await raw.request("GET", f"{jobs}/{name}"))[0] != 200:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        out["one_change_s"] = time.perf_counter() - t0
        await controller.settle()
    cpu0, req0 = controller.cpu(), await controller.requests()
    lag0 = await controller.lag_buckets()
    await asyncio.sleep(args.idle)
    cpu1, req1 = controller.cpu(), await controller.requests()
    out["idle_cpu_per_min_s"] = (cpu1 - cpu0) * 60 / args.idle
    out["idle_writes"] = sum(
        req1.get(m, 0) - req0.get(m, 0) for m in ("POST", "PUT", "PATCH", "DELETE")
    )
    out["idle_lag_le_s"] = worst_lag(lag0, await controller.lag_buckets())
    out["rss_after_idle_mib"] = controller.rss() / 2**20
    await controller.stop()
    return out


async def populate(
    plane: ControlPlane, raw: RawClient, args: argparse.Namespace, tmp: Path, kind: str
) -> str:
    ns = f"scale-{kind}"
    await raw.ensure_namespace(ns)
    replicas, suspended = (1, True) if kind == "suspended" else (4, False)
    path = JOBSETS.format(ns=ns)
    started = time.perf_counter()
    bodies = (
        (path, orjson.dumps(manifest(f"js-{i}", replicas, suspended))) for i in range(args.jobsets)
    )
    codes = await raw.many("POST", bodies, in_flight=args.in_flight)
    print(f"  {kind}: {args.jobsets} JobSets POSTed in {time.perf_counter() - started:.0f} s "
          f"({codes})", flush=True)  # fmt: skip
    creator = Controller(f"populate-{kind}", Path(args.src), plane, tmp)
    await creator.start(limit=1800)
    await wait_count(raw, JOBS.format(ns=ns), replicas * args.jobsets)
    await creator.settle(quiet=2.0, limit=3600)
    print(f"  {kind}: children and statuses written in {time.perf_counter() - started:.0f} s "
          f"(controller CPU {creator.cpu():.1f} s)", flush=True)  # fmt: skip
    await creator.stop()
    return ns


async def main_async(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp, ControlPlane() as plane:
        raw = RawClient(plane, limit=args.in_flight)
        try:
            results["empty"] = await measure(plane, raw, args, Path(tmp), "empty", "")
            print(f"empty: {results['empty']}", flush=True)
            for kind in args.populations:
                ns = await populate(plane, raw, args, Path(tmp), kind)
                results[kind] = await measure(plane, raw, args, Path(tmp), kind, ns)
                print(f"{kind}: {results[kind]}", flush=True)
                if kind != args.populations[-1]:
                    # Keep the next population's figures free of this one's objects.
                    await raw.delete_collection(JOBSETS.format(ns=ns))
                    await raw.delete_collection(JOBS.format(ns=ns))
                    await raw.delete_collection(f"/api/v1/namespaces/{ns}/services")
        finally:
            await raw.close()
    n = args.jobsets
    empty = results["empty"]["rss_mib"] * 2**20
    print()
    print(f"| figure (N = {n}) | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for key in results["empty"] | results.get(args.populations[-1], {}):
        cells = [f"{r[key]:.3g}" if key in r else "" for r in results.values()]
        print(f"| {key} | " + " | ".join(cells) + " |")
    if "suspended" in results:
        per_set = (results["suspended"]["rss_mib"] * 2**20 - empty) / n
        print(f"RSS per suspended JobSet with its Service and 1 Job: {per_set / 1024:.1f} KiB")
        if "running" in results:
            per_job = (results["running"]["rss_mib"] - results["suspended"]["rss_mib"]) * 2**20
            per_job /= 3 * n
            print(f"RSS per cached Job: {per_job / 1024:.1f} KiB")
            print(f"RSS per cached JobSet with its Service: {(per_set - per_job) / 1024:.1f} KiB")
    if "running" in results:
        per_running = (results["running"]["rss_mib"] * 2**20 - empty) / n
        print(f"RSS per running JobSet with its Service and 4 Jobs: {per_running / 1024:.1f} KiB")


# --------------------------------------------------------------------------- queue (issue 27)
KWOK_RUN_FOREVER = "kwok.jobset.test/run-forever"
SERVICES = "/api/v1/namespaces/{ns}/services"
PODS = "/api/v1/namespaces/{ns}/pods"


def queued_manifest(name: str, replicas: int) -> dict[str, Any]:
    """A JobSet as Kueue holds it in a queue: suspended; `replicas` Jobs of one pod each, whose
    pods run until deleted once admitted (kwok)."""
    workers = replicated_job(
        "workers", replicas, backoff_limit=0, annotations={KWOK_RUN_FOREVER: "true"}
    )
    return jobset_manifest(name, replicated_jobs=[workers], suspend=True)


def process_rss(pid: int | None) -> float:
    """Resident memory of a process, MiB (0 when unknown)."""
    if not pid:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
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
    return sizes["etcd_mvcc_db_total_size_in_bytes"], sizes[
        "etcd_mvcc_db_total_size_in_use_in_bytes"
    ]


async def quiet_cluster(cluster: FullCluster, limit: float = 3600.0) -> None:
    """Until the API server and etcd used under 10% of a core for 3 s twice in a row: every
    writer (our controller, the Job controller) is done with the queue."""
    pids = [p for p in (cluster.apiserver.pid if cluster.apiserver else None,
                        cluster.etcd.pid if cluster.etcd else None) if p]  # fmt: skip
    deadline = time.perf_counter() + limit
    calm, last = 0, sum(process_cpu(p) for p in pids)
    while calm < 2:
        await asyncio.sleep(3.0)
        now = sum(process_cpu(p) for p in pids)
        calm = calm + 1 if now - last < 0.3 else 0
        last = now
        if time.perf_counter() > deadline:
            raise TimeoutError("the cluster never went quiet")


async def pods_running(raw: RawClient, ns: str, jobset_name: str, want: int) -> bool:
    selector = f"jobset.sigs.k8s.io/jobset-name%3D{jobset_name}"
    status, body = await raw.request("GET", f"{PODS.format(ns=ns)}?labelSelector={selector}")
    assert status == 200, body
    phases = [(p.get("status") or {}).get("phase") for p in body.get("items") or ()]
    return phases.count("Running") == want


async def queue_run(args: argparse.Namespace, tmp: Path, defer: bool) -> dict[str, float]:
    """One queue of `--jobsets` suspended JobSets on a fresh full cluster, with deferred
    children on or off; the figures of issue 27."""
    label = "on" if defer else "off"
    out: dict[str, float] = {}
    config = f"deferredChildren:\n  enable: {'true' if defer else 'false'}\n"
    cluster = FullCluster(keep_workdir=False).start()
    raw = RawClient(cluster, limit=args.in_flight)
    controller = Controller(f"queue-{label}", Path(args.src), cluster, tmp, config=config)
    try:
        await controller.start(limit=600)
        ns = "queue"
        await raw.ensure_namespace(ns)
        replicas = args.queue_replicas
        path = JOBSETS.format(ns=ns)
        bodies = (
            (path, orjson.dumps(queued_manifest(f"js-{i}", replicas))) for i in range(args.jobsets)
        )
        started = time.perf_counter()
        codes = await raw.many("POST", bodies, in_flight=args.in_flight)
        out["post_s"] = time.perf_counter() - started
        if not defer:
            await wait_count(raw, JOBS.format(ns=ns), replicas * args.jobsets)
        await controller.settle(quiet=2.0, limit=3600)
        await quiet_cluster(cluster)
        out["queue_created_s"] = time.perf_counter() - started
        print(f"  {label}: {args.jobsets} JobSets POSTed in {out['post_s']:.0f} s ({codes}), "
              f"queue settled after {out['queue_created_s']:.0f} s", flush=True)  # fmt: skip
        out["jobsets"] = await count(raw, path)
        out["jobs"] = await count(raw, JOBS.format(ns=ns))
        out["services"] = await count(raw, SERVICES.format(ns=ns))
        out["objects"] = out["jobsets"] + out["jobs"] + out["services"]
        db, in_use = etcd_db_bytes(cluster)
        out["etcd_db_mib"], out["etcd_in_use_mib"] = db / 2**20, in_use / 2**20
        out["apiserver_rss_mib"] = process_rss(cluster.apiserver.pid if cluster.apiserver else 0)
        manager = cluster.controller_manager
        out["controller_manager_rss_mib"] = process_rss(manager.pid if manager else 0)
        out["controller_rss_mib"] = controller.rss() / 2**20
        out["controller_cpu_s"] = controller.cpu()
        # Admission of one JobSet (what Kueue does): suspend false; seconds until all its pods run.
        t0 = time.perf_counter()
        status, body = await raw.request(
            "PATCH", f"{path}/js-0", {"spec": {"suspend": False}}, "application/merge-patch+json"
        )
        assert status == 200, body
        while not await pods_running(raw, ns, "js-0", replicas):
            if time.perf_counter() - t0 > 300:
                raise TimeoutError("the admitted JobSet's pods never all ran")
            await asyncio.sleep(0.05)
        out["admission_to_running_s"] = time.perf_counter() - t0
        print(f"  {label}: {out}", flush=True)
    finally:
        await controller.stop()
        await raw.close()
        cluster.stop()
    return out


QUEUE_FIGURES = (
    ("objects", "objects in the API server (JobSets + Jobs + Services)", "{:.0f}"),
    ("jobs", "of which Jobs", "{:.0f}"),
    ("services", "of which Services", "{:.0f}"),
    ("etcd_db_mib", "etcd database size, MiB", "{:.0f}"),
    ("etcd_in_use_mib", "etcd database in use, MiB", "{:.0f}"),
    ("apiserver_rss_mib", "kube-apiserver RSS, MiB", "{:.0f}"),
    ("controller_manager_rss_mib", "kube-controller-manager RSS, MiB", "{:.0f}"),
    ("controller_rss_mib", "jobset-controller RSS, MiB", "{:.0f}"),
    ("controller_cpu_s", "jobset-controller CPU to build the queue, s", "{:.1f}"),
    ("post_s", "all JobSets POSTed, s", "{:.0f}"),
    ("queue_created_s", "queue created (every writer quiet), s", "{:.0f}"),
    ("admission_to_running_s", "admission to all pods of one JobSet running, s", "{:.2f}"),
)


async def queue_compare(args: argparse.Namespace) -> None:
    results = {}
    with tempfile.TemporaryDirectory(prefix="queue-bench-") as tmp:
        for defer in (False, True):
            results[defer] = await queue_run(args, Path(tmp), defer)
    off, on = results[False], results[True]
    print()
    print(f"| {args.jobsets} suspended JobSets of {args.queue_replicas} Jobs | deferredChildren "
          "off (upstream) | on | on/off |")  # fmt: skip
    print("|---|---:|---:|---:|")
    for key, title, fmt in QUEUE_FIGURES:
        ratio = f"{on[key] / off[key]:.2f}x" if off[key] else "-"
        print(f"| {title} | {fmt.format(off[key])} | {fmt.format(on[key])} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobsets", type=int, default=10000)
    parser.add_argument(
        "--populations", nargs="+", default=["suspended", "running"],
        choices=["suspended", "running"],
    )  # fmt: skip
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[2] / "src"))
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument(
        "--queue", action="store_true",
        help="instead: a queue of --jobsets suspended JobSets on a full cluster, deferredChildren "
        "off then on (objects, etcd size, RSS, queue creation, admission to running)",
    )  # fmt: skip
    parser.add_argument("--queue-replicas", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(queue_compare(args) if args.queue else main_async(args))


if __name__ == "__main__":
    main()
