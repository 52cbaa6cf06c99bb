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

`--queue` measures instead what deferred children (the Configuration's
`deferredChildren.enable`) save on a queue of N suspended JobSets, ours against upstream v0.12.0:
queue_bench.py's docstring says how (`--queue-replicas`, `--step`, `--sides`, `--memory-bound`,
`--min-available` there).

Sizes the issue asks for: `--jobsets 50000 --populations suspended` and
`--jobsets 10000 --populations running`. On the 2-core machine the API server and etcd are the
limit while populating (about 5 minutes per 10,000 JobSets of 4 Jobs).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from benchlib import Controller, RawClient, wait_count, worst_lag
from cpu_bench import JOBS, JOBSETS, jobset
from queue_bench import queue_compare, queue_options

from jobset_controller_dev.envtest import ControlPlane


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
        help="instead: a queue of --jobsets suspended JobSets on a full cluster, upstream's "
        "controller and ours with deferredChildren on (queue_bench.py)",
    )  # fmt: skip
    queue_options(parser)
    args = parser.parse_args()
    asyncio.run(queue_compare(args) if args.queue else main_async(args))


if __name__ == "__main__":
    main()
