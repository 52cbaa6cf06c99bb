"""Benchmark: the controller's CPU time per unit of work, one source tree against another.

The controller runs as a child process (`benchlib.Controller`); the figures are read from outside:
user+sys CPU seconds, RSS, its own request counters, its loop-lag histogram. Scenarios, each in
its own namespaces on one control plane:

- start:    process spawn to /readyz 200 on an empty cluster (best of `--starts`), RSS then;
- 1x1000:   one JobSet with 1000 replicas; seconds until a watch in a process of its own
            (benchlib.CountWatch) has seen all Jobs, and the same 1000 Job bodies POSTed by a
            tight raw client, 50 in flight, just before and just after (the API server's own
            create rate is the ceiling), timed by the same kind of watch (`big_ratio`) and,
            bare, until every POST is answered with no watch open (`big_ratio_bare`, the only
            ratio until round 5 of docs/benchmarks.md's history: it charges the instrument,
            one more watch for the API server to serve and a process to parse its ~1000
            events, to the controller's side alone); controller CPU until it is quiet again; the API
            server's and etcd's CPU in each window; the seconds the controller's client-side
            rate limit alone needs for the creates (`--controller-args` can lift it);
- 500x4:    500 JobSets of 4 Jobs created at once (2000 Job creates); CPU until quiet;
- complete: 500 JobSets of 1 Job, settled; then every Job marked Complete (as the Job controller
            would); CPU and status writes until every JobSet is Completed and the process quiet.
            Every JobSet write seen by the bench's watch is checked: a write that did not change
            the status, or more than one per JobSet, is printed with what it changed;
- idle:     `--idle` seconds with everything above cached: CPU, writes, RSS.

A scenario's CPU window opens after the bench has read the controller's /metrics (its request
counters), so the bench's own scrapes are not counted as the controller's work (until round 4 of
docs/benchmarks.md's history they were: two scrapes, ~5-10 ms each, in every scenario).

Each `--src label=path` is measured in turn (`git worktree add /tmp/before <commit>` gives an
earlier commit's `src`); `--rounds` repeats the sequence so the order does not favour one tree.
Objects are deleted between trees, so each starts from the same cluster. The controller runs in
a venv holding only the runtime dependencies, as the image does (runtime_venv.py; built once and
cached); `--dev-venv` runs it in the development venv instead.

`--upstream` adds upstream's controller v0.12.0 (hack/upstream-jobset.sh) as the first subject,
labelled `upstream`, run from outside the same way (upstreamlib.py says what differs): the
side-by-side table of docs/benchmarks.md (and the README's short one), with `last/first` =
ours / upstream.

Run: .venv/bin/python hack/bench/cpu_bench.py --src before=/tmp/before/src --src after=src
     [--rounds 1] [--idle 60] [--starts 3] [--scenarios start big many complete idle]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from benchlib import (
    Controller,
    CountWatch,
    RawClient,
    Watcher,
    control_plane_cpu,
    parse_src,
    worst_lag,
)
from rounds import side_order
from runtime_venv import add_venv_option, ours_python
from upstreamlib import UpstreamController, scraper_token

from jobset_controller.api import JobSet, default_jobset
from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.cli import build_parser
from jobset_controller.config import Configuration
from jobset_controller.reconcile.desired_jobs import construct_job
from jobset_controller.runtime.clock import RealClock
from jobset_controller.runtime.ratelimit import client_throttle
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.upstream import ensure_upstream

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
SCENARIOS = ("start", "big", "many", "complete", "idle")
UPSTREAM = "upstream"  # the label of upstream's controller (`--upstream`)


def jobset(name: str, replicas: int) -> dict[str, Any]:
    """Posted already defaulted (the spec the mutating webhook would write): the bench registers
    no webhooks, and upstream's reconciler dereferences defaults it expects the webhook to have
    set (a nil-pointer panic on every undefaulted JobSet)."""
    workers = replicated_job("workers", replicas, backoff_limit=0)
    manifest = jobset_manifest(name, replicated_jobs=[workers])
    manifest["spec"] = default_jobset(JobSet.model_validate(manifest)).to_dict()["spec"]
    return manifest


def raw_job_bodies(namespace: str, count: int) -> list[bytes]:
    """The Jobs the controller builds for `jobset("big", count)`, built by the same code, minus
    the Job-level JobSet label so a running controller's informer never sees them."""
    manifest = jobset("big", count)
    manifest["metadata"].update(namespace=namespace, uid="00000000-0000-0000-0000-000000000000")
    js = default_jobset(JobSet.model_validate(manifest))
    rjob = js.spec.replicated_jobs[0]
    bodies = []
    for index in range(count):
        job = construct_job(js, rjob, index, restarts=0, job_restart_attempt=None)
        job["metadata"]["labels"].pop(JOBSET_NAME_KEY)
        bodies.append(orjson.dumps(job))
    return bodies


@dataclass(frozen=True)
class RawRun:
    """One raw-client run: seconds until every POST was answered, seconds until a watch on the
    namespace (the instrument the controller's run is timed with) had seen every Job (None when
    no watch was open), this process's CPU meanwhile, and the API server + etcd CPU."""

    answered_s: float
    seen_s: float | None
    cpu_s: float
    plane_cpu_s: float


async def raw_creates(
    plane: ControlPlane, raw: RawClient, namespace: str, count: int, *, watched: bool
) -> RawRun:
    """The raw client creates the Jobs, 50 in flight. `watched`: a `CountWatch` follows the
    namespace meanwhile and times the run, as one times the controller's; without it, the CPU
    figure is the client's own (the floor of what any client of ours pays for those
    requests)."""
    await raw.ensure_namespace(namespace)
    bodies = raw_job_bodies(namespace, count)
    path = JOBS.format(ns=namespace)
    watch = CountWatch(plane, path, count) if watched else None
    try:
        if watch is not None:
            await watch.start()
        plane0, cpu0, started = control_plane_cpu(plane), time.process_time(), time.perf_counter()
        codes = await raw.many("POST", ((path, body) for body in bodies), in_flight=50)
        answered = time.perf_counter() - started
        assert codes == {201: count}, codes
        seen = None if watch is None else await watch.seen() - started
    finally:
        if watch is not None:
            await watch.stop()
    run = RawRun(answered, seen, time.process_time() - cpu0, control_plane_cpu(plane) - plane0)
    await raw.delete_collection(path)
    return run


def rate_limit_floor(creates: int, controller_args: list[str]) -> float:
    """Seconds the controller's client-side token bucket alone needs for `creates` requests
    when it starts full: `burst` at once, the rest at `qps` per second (the stock
    `--kube-api-qps`/`--kube-api-burst` are 500/500, upstream's; so 1000 creates take >= 1 s
    whatever the API server could take), the flags read as the controller reads them. Other
    requests of the window are not counted."""
    flags = build_parser().parse_args(["run", *controller_args])  # the controller's own reading
    stock = Configuration().client_connection
    qps = stock.qps if flags.kube_api_qps is None else flags.kube_api_qps
    burst = stock.burst if flags.kube_api_burst is None else flags.kube_api_burst
    bucket = client_throttle(qps, burst, clock=RealClock())
    return 0.0 if bucket is None else max(creates - bucket.burst, 0) / bucket.qps


def writes(before: dict[str, float], after: dict[str, float]) -> float:
    return sum(after.get(m, 0) - before.get(m, 0) for m in ("POST", "PUT", "PATCH", "DELETE"))


def completed(js: dict[str, Any]) -> bool:
    return (js.get("status") or {}).get("terminalState") == "Completed"


def make_controller(
    label: str, src: Path, plane: ControlPlane, workdir: Path, args: argparse.Namespace
) -> Controller:
    """Ours from a source tree, or upstream's binary for the tree `--upstream` adds."""
    flags = args.extra_args.get(label, [])
    if label == UPSTREAM:
        return UpstreamController(
            label, src, plane, workdir, extra_args=flags, token=args.scraper_token
        )
    return Controller(
        label, src, plane, workdir, profile=args.profile, python=args.python, extra_args=flags
    )


async def run_tree(
    plane: ControlPlane,
    raw: RawClient,
    label: str,
    src: Path,
    round_: int,
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, float]:
    out: dict[str, float] = {}
    tag = f"{label}-r{round_}"
    flags = args.extra_args.get(label, [])
    scenarios = set(args.scenarios)
    if "start" in scenarios:
        starts, rss, cpu, after = [], [], [], []
        for _ in range(args.starts):
            probe = make_controller(label, src, plane, workdir, args)
            starts.append(await probe.start())
            cpu.append(probe.cpu())
            rss.append(probe.rss())
            after.append(await probe.settle() - cpu[-1])
            await probe.stop()
        out["start_s"] = min(starts)
        out["start_cpu_s"] = min(cpu)
        out["start_median_s"] = statistics.median(starts)
        out["start_rss_mib"] = min(rss) / 2**20
        out["start_after_cpu_s"] = statistics.median(after)

    controller = make_controller(label, src, plane, workdir, args)
    await controller.start()
    namespaces: list[str] = []

    async def namespace(kind: str) -> str:
        name = f"{kind}-{tag}"
        await raw.ensure_namespace(name)
        namespaces.append(name)
        return name

    try:
        if "big" in scenarios:
            ns = await namespace("big")
            # Bare and watched raw runs before and after, in mirrored order, so a drift of
            # the control plane (etcd growing) weighs on both kinds alike.
            raws = [
                await raw_creates(plane, raw, f"raw-a-{tag}", args.big, watched=False),
                await raw_creates(plane, raw, f"raw-b-{tag}", args.big, watched=True),
            ]
            await controller.settle()
            req0, passes0 = await controller.requests(), await controller.passes()
            cpu0 = controller.cpu()  # after the scrapes: the bench's own reads are not the work
            watch = CountWatch(plane, JOBS.format(ns=ns), args.big)
            try:
                await watch.start()
                plane0, started = control_plane_cpu(plane), time.perf_counter()
                status, body = await raw.request(
                    "POST", JOBSETS.format(ns=ns), jobset("big", args.big)
                )
                assert status == 201, body
                out["big_s"] = await watch.seen() - started
            finally:
                await watch.stop()
            out["big_plane_cpu_s"] = control_plane_cpu(plane) - plane0
            cpu1 = await controller.settle()
            req1 = await controller.requests()
            raws.append(await raw_creates(plane, raw, f"raw-c-{tag}", args.big, watched=True))
            raws.append(await raw_creates(plane, raw, f"raw-d-{tag}", args.big, watched=False))
            bare, watched = raws[0::3], raws[1:3]
            out["big_cpu_s"] = cpu1 - cpu0
            out["big_raw_s"] = statistics.mean(r.answered_s for r in bare)
            out["big_raw_cpu_s"] = statistics.mean(r.cpu_s for r in bare)
            out["big_raw_plane_cpu_s"] = statistics.mean(r.plane_cpu_s for r in bare)
            seen = [r.seen_s for r in watched if r.seen_s is not None]
            assert len(seen) == len(watched)
            out["big_raw_seen_s"] = statistics.mean(seen)
            out["big_raw_seen_plane_cpu_s"] = statistics.mean(r.plane_cpu_s for r in watched)
            out["big_ratio"] = out["big_s"] / out["big_raw_seen_s"]
            out["big_ratio_bare"] = out["big_s"] / out["big_raw_s"]
            out["big_limit_floor_s"] = rate_limit_floor(args.big, flags)
            out["big_writes"] = writes(req0, req1)
            # What the writes are: upstream has no create expectations, so a pass that reads a
            # Job cache behind its own creates POSTs those Jobs again and gets 409s back.
            out["big_creates"] = req1.get("POST", 0) - req0.get("POST", 0)
            out["big_conflicts"] = req1.get("code:409", 0) - req0.get("code:409", 0)
            out["big_status_writes"] = req1.get("PUT", 0) - req0.get("PUT", 0)
            out["big_passes"] = await controller.passes() - passes0

        if "many" in scenarios:
            ns = await namespace("many")
            jobs = Watcher(raw, JOBS.format(ns=ns))
            await jobs.start()
            req0 = await controller.requests()
            cpu0 = controller.cpu()  # after the scrape
            path = JOBSETS.format(ns=ns)
            bodies = [(path, orjson.dumps(jobset(f"js-{i}", 4))) for i in range(args.many)]
            started = time.perf_counter()
            await raw.many("POST", bodies, in_flight=50)
            await jobs.wait(lambda: len(jobs.objects) >= 4 * args.many)
            out["many_s"] = time.perf_counter() - started
            cpu1 = await controller.settle()
            req1 = await controller.requests()
            await jobs.stop()
            out["many_cpu_s"] = cpu1 - cpu0
            out["many_writes"] = writes(req0, req1)
            out["many_rss_mib"] = controller.rss() / 2**20
            out["many_cached_jobs"] = sum([4 * args.many, args.big if "big" in scenarios else 0])

        if "complete" in scenarios:
            ns = await namespace("done")
            jobs = Watcher(raw, JOBS.format(ns=ns))
            jobset_writes: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
            counting = False

            def on_jobset(kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
                if counting and kind == "MODIFIED":
                    jobset_writes[new["metadata"]["name"]].append(
                        ((old or {}).get("status"), new.get("status"))
                    )

            jobsets = Watcher(raw, JOBSETS.format(ns=ns), on_event=on_jobset)
            await jobs.start()
            await jobsets.start()
            path = JOBSETS.format(ns=ns)
            per = args.per_jobset
            bodies = [(path, orjson.dumps(jobset(f"js-{i}", per))) for i in range(args.many)]
            await raw.many("POST", bodies, in_flight=50)
            await jobs.wait(lambda: len(jobs.objects) >= per * args.many)
            await jobsets.wait(lambda: all(js.get("status") for js in jobsets.objects.values()))
            await controller.settle()
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            patches = []
            for job in sorted(jobs.objects.values(), key=lambda j: j["metadata"]["name"]):
                complete = {
                    "startTime": now, "completionTime": now, "active": 0, "ready": 0,
                    "succeeded": 1, "completedIndexes": "0",
                    "conditions": [
                        {"type": "SuccessCriteriaMet", "status": "True",
                         "lastTransitionTime": now},
                        {"type": "Complete", "status": "True", "lastTransitionTime": now},
                    ],
                }  # fmt: skip
                patches.append(
                    (
                        JOBS.format(ns=ns) + f"/{job['metadata']['name']}/status",
                        orjson.dumps({"status": complete}),
                    )
                )
            req0 = await controller.requests()
            cpu0 = controller.cpu()  # after the scrape
            counting = True
            started = time.perf_counter()
            codes = await raw.many(
                "PATCH", patches, in_flight=50, content_type="application/merge-patch+json"
            )
            assert codes == {200: len(patches)}, codes
            await jobsets.wait(lambda: all(completed(js) for js in jobsets.objects.values()))
            out["complete_s"] = time.perf_counter() - started
            cpu1 = await controller.settle()
            req1 = await controller.requests()
            counting = False
            await jobs.stop()
            await jobsets.stop()
            out["complete_cpu_s"] = cpu1 - cpu0
            out["complete_status_writes"] = req1.get("PUT", 0) - req0.get("PUT", 0)
            out["complete_conflicts"] = req1.get("code:409", 0) - req0.get("code:409", 0)
            out["complete_jobset_writes_seen"] = sum(len(w) for w in jobset_writes.values())
            extra = {name: w for name, w in jobset_writes.items() if len(w) != 1}
            noop = sum(1 for w in jobset_writes.values() for old, new in w if old == new)
            out["complete_noop_writes"] = noop
            for name, changes in list(extra.items())[:3]:
                print(f"  [{tag}] {name}: {len(changes)} writes")
                for old, new in changes:
                    print(f"      {_diff(old or {}, new or {})}")

        if "idle" in scenarios:
            await controller.settle()
            lag0 = await controller.lag_buckets()
            req0 = await controller.requests()
            cpu0 = controller.cpu()  # after the scrape
            await asyncio.sleep(args.idle)
            cpu1, req1 = controller.cpu(), await controller.requests()
            out["idle_cpu_per_min_s"] = (cpu1 - cpu0) * 60 / args.idle
            out["idle_writes"] = writes(req0, req1)
            lag1 = await controller.lag_buckets()
            if lag1:  # upstream has no loop-lag histogram
                out["idle_lag_le_s"] = worst_lag(lag0, lag1)
            out["idle_cached_jobsets"] = sum(
                [1 if "big" in scenarios else 0, args.many if "many" in scenarios else 0,
                 args.many if "complete" in scenarios else 0]
            )  # fmt: skip
        out["rss_mib"] = controller.rss() / 2**20
        out["log_lines"] = controller.log_lines()
    finally:
        await controller.stop()
        for ns in namespaces:
            await raw.delete_collection(JOBSETS.format(ns=ns))
            await raw.delete_collection(JOBS.format(ns=ns))
    return out


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(set(old) | set(new))
    parts = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return "; ".join(parts)[:600] or "(no status change)"


def _fmt(value: float) -> str:
    """A count exactly (1480 writes, not 1.48e+03: a difference of one write can be the finding),
    anything else to three significant digits."""
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


FIGURES = (
    ("start_s", "start to /readyz, best (s)"),
    ("start_median_s", "start to /readyz, median (s)"),
    ("start_cpu_s", "CPU to /readyz, best (s)"),
    ("start_after_cpu_s", "CPU from /readyz to quiet, once (warm-up), median (s)"),
    ("start_rss_mib", "RSS at /readyz (MiB)"),
    ("big_s", "1x{big}: all Jobs exist (s)"),
    ("big_raw_seen_s", "1x{big}: raw client, same Jobs, seen by the same watch (s)"),
    ("big_ratio", "1x{big}: controller / raw client, both timed by the watch"),
    ("big_limit_floor_s", "1x{big}: the controller's client-side rate limit alone needs (s)"),
    ("big_raw_s", "1x{big}: raw client, no watch open, until every POST answered (s)"),
    ("big_ratio_bare", "1x{big}: controller / raw client without the watch"),
    ("big_raw_cpu_s", "1x{big}: raw client's own CPU, no watch (s)"),
    ("big_plane_cpu_s", "1x{big}: API server + etcd CPU, controller's run (s)"),
    ("big_raw_seen_plane_cpu_s", "1x{big}: API server + etcd CPU, raw client with the watch (s)"),
    ("big_raw_plane_cpu_s", "1x{big}: API server + etcd CPU, raw client, no watch (s)"),
    ("big_cpu_s", "1x{big}: controller CPU (s)"),
    ("big_writes", "1x{big}: writes"),
    ("big_creates", "1x{big}: POSTs (Job, Service and Event creates)"),
    ("big_conflicts", "1x{big}: 409 answers (a create of what exists, a stale status write)"),
    ("big_status_writes", "1x{big}: PUTs (status writes)"),
    ("big_passes", "1x{big}: reconcile passes"),
    ("many_s", "{many}x4: all Jobs exist (s)"),
    ("many_cpu_s", "{many}x4: controller CPU (s)"),
    ("many_writes", "{many}x4: writes"),
    ("many_cached_jobs", "{many}x4: Jobs in the cache after it"),
    ("many_rss_mib", "{many}x4: RSS with those Jobs cached (MiB)"),
    ("complete_s", "{many} completions: all Completed (s)"),
    ("complete_cpu_s", "{many} completions: controller CPU (s)"),
    ("complete_status_writes", "{many} completions: status writes"),
    ("complete_conflicts", "{many} completions: 409 answers"),
    ("complete_jobset_writes_seen", "{many} completions: JobSet changes seen"),
    ("complete_noop_writes", "{many} completions: writes not changing status"),
    ("idle_cached_jobsets", "idle: JobSets cached"),
    ("idle_cpu_per_min_s", "idle: CPU per minute (s)"),
    ("idle_writes", "idle: writes"),
    ("idle_lag_le_s", "idle: worst loop lag <= (s)"),
    ("rss_mib", "RSS at the end (MiB)"),
    ("log_lines", "log lines"),
)


async def main_async(args: argparse.Namespace) -> None:
    trees = parse_src(args.src)
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="cpu-bench-") as tmp, ControlPlane() as plane:
        raw = RawClient(plane)
        args.scraper_token = scraper_token(plane, Path(tmp)) if args.upstream else ""
        try:
            for round_ in range(args.rounds):
                for label, src in side_order(trees, round_):
                    r = await run_tree(plane, raw, label, src, round_, args, Path(tmp))
                    results[label].append(r)
                    print(f"[{label} round {round_}] " + ", ".join(
                        f"{k}={_fmt(v)}" for k, v in r.items()
                    ), flush=True)  # fmt: skip
        finally:
            await raw.close()
    labels = [label for label, _ in trees]
    print()
    print("| figure | " + " | ".join(labels) + (" | last/first |" if len(labels) > 1 else " |"))
    print("|---|" + "---|" * (len(labels) + (1 if len(labels) > 1 else 0)))
    for key, title in FIGURES:
        values = [[r[key] for r in results[label] if key in r] for label in labels]
        if not all(values):
            continue
        cells = [" / ".join(_fmt(v) for v in vs) for vs in values]
        row = f"| {title.format(big=args.big, many=args.many)} | " + " | ".join(cells)
        if len(labels) > 1:
            first, last = statistics.median(values[0]), statistics.median(values[-1])
            row += f" | {last / first:.2f}x" if first else " | -"
        print(row + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", default=[], help="label=path of a src tree")
    parser.add_argument(
        "--controller-args",
        action="append",
        default=[],
        metavar="LABEL=ARGS",
        help="extra flags for the controller of tree LABEL (one string, split on spaces), e.g. "
        "lifting the client-side rate limit: 'fast=--kube-api-qps=100000 --kube-api-burst=100000'"
        " (one path may be given twice under two labels)",
    )
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="measure upstream's controller v0.12.0 (hack/upstream-jobset.sh) first, labelled "
        "'upstream', beside the --src trees: the side-by-side figures",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--big", type=int, default=1000)
    parser.add_argument("--many", type=int, default=500)
    parser.add_argument("--per-jobset", type=int, default=1, help="Jobs per completed JobSet")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy raw profiles here")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    add_venv_option(parser)
    args = parser.parse_args()
    args.python = ours_python(args)
    args.extra_args = {}
    labels = {label for label, _ in parse_src(args.src)} if args.src else {"current"}
    if args.upstream:
        labels.add(UPSTREAM)
    for label, _, value in (a.partition("=") for a in args.controller_args):
        if label not in labels or label in args.extra_args:
            parser.error(f"--controller-args {label}=...: no --src {label}, or given twice")
        args.extra_args[label] = value.split()
        rate_limit_floor(args.big, args.extra_args[label])  # refuses what it cannot read, now
    if not args.src:
        args.src = [f"current={Path(__file__).resolve().parents[2] / 'src'}"]
    if args.upstream:
        args.src.insert(0, f"{UPSTREAM}={ensure_upstream()}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
