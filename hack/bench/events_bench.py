"""Benchmark: Events written under load, ours and upstream's v0.12.0 (numbers, no pass/fail).

N suspended JobSets (one replicated Job each, posted already defaulted as cpu_bench posts them)
are created at once by a raw client (`--in-flight` at a time) while the controller runs; each
one's reconcile creates its suspended Job and headless Service, writes its status and records
one Event. Counted from outside, once every controller is quiet:

- Events written about the JobSets (core/v1 and events.k8s.io/v1 share one store, so both
  controllers' Events are listed from /api/v1), and the seconds from the first create to the
  last Event seen;
- event writes the API server refused (apiserver_request_total, resource events, non-2xx);
- ours: `jobset_events_dropped_total` by reason (queue_full is the recorder's full buffer);
- the controller's API requests (rest_client_requests_total), CPU seconds and RSS.

Each subject gets a control plane of its own (etcd and kube-apiserver, no garbage collector to
clear the previous subject's JobSets, whose presence would make the next controller reconcile
them too), in turn, in the order given.

Upstream's controller runs first unless `--no-upstream`; the table then gives ours / upstream.

Run: .venv/bin/python hack/bench/events_bench.py [--jobsets 20000] [--no-upstream]
     [--src label=path ...] [--in-flight 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import orjson
from benchlib import Controller, RawClient, count, parse_metrics
from cpu_bench import JOBSETS, jobset
from runtime_venv import add_venv_option, ours_python
from upstreamlib import UpstreamController, scraper_token

from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.upstream import ensure_upstream

UPSTREAM = "upstream"
EVENTS = "/api/v1/namespaces/{ns}/events"
NAMESPACE = "events-bench"


def suspended(name: str) -> bytes:
    manifest = jobset(name, 1)
    manifest["spec"]["suspend"] = True
    return orjson.dumps(manifest)


async def refused_event_writes(raw: RawClient) -> float:
    """Non-2xx answers of the API server to event writes so far (every client's)."""
    async with raw.session.get(raw.base + "/metrics") as response:
        text = await response.text()
    total = 0.0
    for (name, labels), value in parse_metrics(text).items():
        fields = dict(labels)
        if (
            name == "apiserver_request_total"
            and fields.get("resource") == "events"
            and fields.get("verb") in ("POST", "PATCH", "PUT")
            and not fields.get("code", "").startswith("2")
        ):
            total += value
    return total


async def measure(label: str, src: Path, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    with ControlPlane() as plane:
        raw = RawClient(plane)
        try:
            controller: Controller
            if label == UPSTREAM:
                controller = UpstreamController(
                    label, src, plane, tmp, token=scraper_token(plane, tmp)
                )
            else:
                controller = Controller(label, src, plane, tmp, python=args.python)
            await controller.start()
            await raw.ensure_namespace(NAMESPACE)
            await controller.settle()
            refused0 = await refused_event_writes(raw)
            cpu0 = controller.cpu()
            events = EVENTS.format(ns=NAMESPACE)
            path = JOBSETS.format(ns=NAMESPACE)
            bodies = (suspended(f"js-{index}") for index in range(args.jobsets))
            started = time.perf_counter()
            codes = await raw.many(
                "POST", ((path, body) for body in bodies), in_flight=args.in_flight
            )
            assert codes == {201: args.jobsets}, codes
            out["create_s"] = time.perf_counter() - started
            # Until every Event is there, or the count stops growing once the controller is
            # quiet (dropped Events never come).
            last, last_at = -1, time.perf_counter()
            while True:
                seen = await count(raw, events)
                if seen != last:
                    last, last_at = seen, time.perf_counter()
                if seen >= args.jobsets:
                    break
                if time.perf_counter() - last_at > args.quiet:
                    break
                await asyncio.sleep(0.5)
            out["events_s"] = last_at - started
            out["events"] = float(last)
            await controller.settle(quiet=2.0, limit=3600)
            out["events"] = float(await count(raw, events))
            out["cpu_s"] = controller.cpu() - cpu0
            out["rss_mib"] = controller.rss() / 2**20
            out["refused_event_writes"] = await refused_event_writes(raw) - refused0
            requests = await controller.requests()
            out["requests"] = sum(v for k, v in requests.items() if not k.startswith("code:"))
            if label != UPSTREAM:
                for (name, labels), value in (await controller.metrics()).items():
                    if name == "jobset_events_dropped_total":
                        key = f"dropped_{dict(labels)['reason']}"
                        out[key] = out.get(key, 0.0) + value
            await controller.stop()
        finally:
            await raw.close()
    return out


FIGURES = (
    ("create_s", "{n} JobSets created by the raw client (s)"),
    ("events", "Events written"),
    ("events_s", "first create to last Event seen (s)"),
    ("refused_event_writes", "event writes refused by the API server"),
    ("dropped_queue_full", "dropped: buffer full (ours)"),
    ("dropped_write_failed", "dropped: write failed (ours)"),
    ("requests", "controller API requests"),
    ("cpu_s", "controller CPU (s)"),
    ("rss_mib", "controller RSS at the end (MiB)"),
)


async def main_async(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="events-bench-") as tmp:
        for spec in args.src:
            label, _, path = spec.partition("=")
            workdir = Path(tmp) / label
            workdir.mkdir()
            results[label] = await measure(label, Path(path), args, workdir)
            print(f"[{label}] {results[label]}", flush=True)
    labels = list(results)
    load = os.getloadavg()
    print(f"\n{args.jobsets} suspended JobSets created {args.in_flight} at a time; "
          f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")  # fmt: skip
    ratio = len(labels) > 1
    print("| figure | " + " | ".join(labels) + (" | last / first |" if ratio else " |"))
    print("|---|" + "---:|" * (len(labels) + ratio))
    for key, title in FIGURES:
        values = [results[label].get(key) for label in labels]
        if all(v is None for v in values):
            continue
        cells = ["-" if v is None else f"{v:.3g}" if v % 1 else f"{v:.0f}" for v in values]
        row = f"| {title.format(n=args.jobsets)} | " + " | ".join(cells)
        if ratio:
            first, last = values[0], values[-1]
            row += f" | {last / first:.2f}x" if first and last is not None else " | -"
        print(row + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobsets", type=int, default=20000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--src", action="append", default=[], help="label=path of a src tree")
    parser.add_argument(
        "--no-upstream", dest="upstream", action="store_false", help="ours alone (no upstream)"
    )
    parser.add_argument(
        "--quiet", type=float, default=30.0, help="seconds without a new Event that end a run"
    )
    add_venv_option(parser)
    args = parser.parse_args()
    args.python = ours_python(args)
    if not args.src:
        args.src = [f"ours={Path(__file__).resolve().parents[2] / 'src'}"]
    if args.upstream:
        args.src.insert(0, f"{UPSTREAM}={ensure_upstream()}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
