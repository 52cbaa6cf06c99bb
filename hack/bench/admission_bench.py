"""Benchmark: admission throughput and latency of the webhook server, ours and upstream's v0.12.0
(numbers and ratios, no pass/fail).

With exclusive placement by leader and followers, the pod webhooks sit on the create path of
every pod of the JobSet: the API server waits for `mpod` and then `vpod` before it stores a pod.
This bench puts the same AdmissionReviews to both controllers' webhook servers, in turn, on one
local control plane (etcd and kube-apiserver), each server serving the same certificate:

- reviews: pod CREATE to `/mutate--v1-pod` and `/validate--v1-pod` for a leader (completion index
  0: the affinity terms) and a follower (index 1: its leader looked up in the controller's pod
  cache, the leader's node in its node cache, the nodeSelector patched in), and JobSet CREATE to
  the JobSet webhooks (`mjobset`, `vjobset`; vjobset gets the JobSet as the mutating webhook left
  it). The pods are built from the Job our reconcile builds for an exclusive JobSet, as the Job
  controller builds pods from a Job's template; the leader pod exists, bound to a node with the
  topology label, before either controller starts. Every kind is checked once before its load
  (allowed, and a follower's patch holds its leader's topology);
- load: a client written in Go (hack/bench/admission_load, standard library only, built into the
  project's cache on first use) keeps `--conns` connections busy (1, 16, 64, 256 by default),
  each sending its next review when the last is answered, for `--seconds` per cell;
- `--rate R`: the pod reviews also as an open load, R due a second on `--rate-conns`
  connections for `--rate-seconds` (10: a p99 needs a few hundred reviews), latency counted
  from when each was due (admission_load/main.go): the goal is a p99 at the rate
  kube-controller-manager creates pods in placement_bench.py;
- figures per cell: reviews/s, latency p50/p99/max as the client saw it, the server's CPU per
  review (its process's user+sys over the window / reviews), its RSS at the end of the window,
  and the client's own CPU (to show the client is not the limit);
- busy: the same cells again while the controller reconciles one JobSet of `--busy-jobs` (1000)
  Jobs created at the window's start: the window lasts until all its Jobs exist, so it is the
  reconcile's own length. Ours serves the webhooks from an event loop on a thread of its own
  (runtime/loopthread.py), beside the loop its reconciles use; this shows what a busy reconcile
  still adds to admission latency (`--src before=<tree>` puts an older tree beside it). The
  JobSet and its Jobs are deleted after each busy cell, and the controller settles, before the
  next one;
- `--rounds N`: every cell N times, the sides in turn (the order reversed every other round),
  each figure the median of its rounds and the p99s' spread beside the goals: a low rate's p99
  is decided by a few host stalls (hack/bench/rounds.py).

Both controllers: leader election off, the same client budget (QPS 500, burst 500), no webhook
configurations registered (reviews go to the servers directly, never through the API server),
ours in the runtime-only venv as in the image (`--dev-venv`: this one). Upstream's server is
controller-runtime's (Go net/http, crypto/tls).

Run: .venv/bin/python hack/bench/admission_bench.py [--conns 1 16 64 256] [--seconds 3] [--rate 50]
     [--kinds mpod-leader ...] [--no-busy] [--busy-jobs 1000] [--only ours|upstream] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import hashlib
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from benchlib import Controller, RawClient, count
from cpu_bench import JOBS, JOBSETS, jobset
from rounds import median_of_rounds, side_order, spread
from runtime_venv import CACHE, ROOT, add_venv_option, ours_python
from upstreamlib import UpstreamController, scraper_token

from jobset_controller.api import JobSet, default_jobset
from jobset_controller.api.constants import (
    EXCLUSIVE_KEY,
    JOB_KEY,
)
from jobset_controller.reconcile.desired_jobs import construct_job
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import RACK_LABEL
from jobset_controller_dev.envtest.processes import process_cpu
from jobset_controller_dev.envtest.upstream import ensure_upstream

HERE = Path(__file__).resolve().parent
LOAD_SOURCE = HERE / "admission_load"
UPSTREAM = "upstream"
NAMESPACE = "admission-bench"
NODE = "bench-node-0"
RACK = "rack-0"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_UID = "6f0d3c8e-0000-4000-8000-00000000b0b0"
KINDS = ("mpod-leader", "mpod-follower", "vpod-leader", "vpod-follower", "mjobset", "vjobset")
PATHS = {
    "mpod": "/mutate--v1-pod",
    "vpod": "/validate--v1-pod",
    "mjobset": "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
    "vjobset": "/validate-jobset-x-k8s-io-v1alpha2-jobset",
}


# ----------------------------------------------------------------------------- the Go client
def load_client() -> Path:
    """The Go load client's binary, built on first use into the project's cache, keyed by its
    source and the Go version (standard library only: nothing to download)."""
    version = subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode())
    for name in ("go.mod", "main.go"):
        digest.update((LOAD_SOURCE / name).read_bytes())
    binary = CACHE / f"admission-load-{digest.hexdigest()[:12]}" / "admission-load"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    subprocess.run(
        ["go", "build", "-trimpath", "-o", str(binary), "."], cwd=LOAD_SOURCE, env=env, check=True
    )
    return binary


class Load:
    """One run of the Go client: connections open and warm on `open`, a window between `start`
    and `stop` (module docstring of admission_load/main.go)."""

    def __init__(
        self, binary: Path, url: str, ca: Path, body: Path, conns: int, rate: float = 0.0
    ) -> None:
        self.argv = [str(binary), f"-url={url}", f"-ca={ca}", f"-body={body}", f"-conns={conns}"]
        if rate:
            self.argv.append(f"-rate={rate}")
        self.proc: asyncio.subprocess.Process | None = None
        self.cpu0 = 0.0

    async def open(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        if line.strip() != b"ready":
            assert self.proc.stderr is not None
            error = await self.proc.stderr.read()
            raise RuntimeError(f"load client: {line!r} {error.decode()[-2000:]}")

    async def start(self) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        self.cpu0 = process_cpu(self.proc.pid)
        self.proc.stdin.write(b"start\n")
        await self.proc.stdin.drain()

    async def stop(self) -> dict[str, Any]:
        """Close the window; the client's figures, with its CPU seconds in the window."""
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        cpu = process_cpu(self.proc.pid) - self.cpu0
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        await self.proc.wait()
        out: dict[str, Any] = orjson.loads(line)
        out["client_cpu_s"] = cpu
        return out

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


# ----------------------------------------------------------------------------- reviews
def exclusive_job() -> dict[str, Any]:
    """Job 0 of a JobSet with exclusive placement per rack, as our reconcile builds it when the
    pod webhooks are registered (placed by leader and followers)."""
    workers = replicated_job("w", 4, pods=16)
    manifest = jobset_manifest(
        "bench", replicated_jobs=[workers], annotations={EXCLUSIVE_KEY: RACK_LABEL}
    )
    manifest["metadata"].update(namespace=NAMESPACE, uid="6f0d3c8e-0000-4000-8000-00000000a0a0")
    js = default_jobset(JobSet.model_validate(manifest))
    job: dict[str, Any] = construct_job(
        js, js.spec.replicated_jobs[0], 0, restarts=0, job_restart_attempt=None, pod_webhooks=True
    )
    return job


def pod_of(job: dict[str, Any], index: int, suffix: str) -> dict[str, Any]:
    """The pod of completion index `index` as the Job controller creates it from the template."""
    template = copy.deepcopy(job["spec"]["template"])
    meta = template["metadata"]
    labels = {**meta.get("labels", {}), COMPLETION_INDEX: str(index)}
    labels["batch.kubernetes.io/controller-uid"] = JOB_UID
    labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
    annotations = {**meta.get("annotations", {}), COMPLETION_INDEX: str(index)}
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{index}-{suffix}",
            "generateName": f"{name}-{index}-",
            "namespace": NAMESPACE,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": JOB_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {**template["spec"], "hostname": f"{name}-{index}"},
    }


def review(kind: str, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A CREATE review of `obj`, as the API server sends it."""
    group = "jobset.x-k8s.io" if resource == "jobsets" else ""
    version = "v1alpha2" if resource == "jobsets" else "v1"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b7a5a9e-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": obj["metadata"].get("name", ""),
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:job-controller",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


@dataclass(frozen=True)
class Fixtures:
    """The objects created before the controllers start, and each kind's review body."""

    leader: dict[str, Any]
    bodies: dict[str, bytes]

    @classmethod
    def build(cls) -> Fixtures:
        job = exclusive_job()
        leader = pod_of(job, 0, "lead0")
        follower = pod_of(job, 1, "foll1")
        placed_leader = copy.deepcopy(leader)  # what vpod sees: mpod's affinity applied
        placed_leader["spec"]["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {
                                    "key": JOB_KEY,
                                    "operator": "In",
                                    "values": [leader["metadata"]["labels"][JOB_KEY]],
                                }
                            ]
                        },
                        "topologyKey": RACK_LABEL,
                        "namespaceSelector": {},
                    }
                ]
            }
        }
        placed_follower = copy.deepcopy(follower)
        placed_follower["spec"]["nodeSelector"] = {RACK_LABEL: RACK}
        example = yaml.safe_load((ROOT / "examples" / "pytorch-workers.yaml").read_text())
        example["metadata"]["namespace"] = NAMESPACE
        defaulted = default_jobset(JobSet.model_validate(example)).to_dict()
        reviews = {
            "mpod-leader": review("Pod", "pods", leader),
            "mpod-follower": review("Pod", "pods", follower),
            "vpod-leader": review("Pod", "pods", placed_leader),
            "vpod-follower": review("Pod", "pods", placed_follower),
            "mjobset": review("JobSet", "jobsets", example),
            "vjobset": review("JobSet", "jobsets", defaulted),
        }
        bound = copy.deepcopy(leader)
        bound["spec"]["nodeName"] = NODE
        return cls(bound, {k: orjson.dumps(v) for k, v in reviews.items()})

    async def create(self, raw: RawClient) -> None:
        await raw.ensure_namespace(NAMESPACE)
        status, body = await raw.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"metadata": {"name": "default"}},
        )  # fmt: skip
        assert status in (201, 409), body
        node = {"metadata": {"name": NODE, "labels": {RACK_LABEL: RACK, "type": "bench"}}}
        status, body = await raw.request("POST", "/api/v1/nodes", node)
        assert status == 201, body
        leader = {k: v for k, v in self.leader.items() if k != "status"}
        leader["metadata"] = {
            k: v for k, v in leader["metadata"].items() if k not in ("generateName",)
        }
        status, body = await raw.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", leader)
        assert status == 201, body


def check_answer(kind: str, answer: dict[str, Any]) -> str | None:
    """Why an answer to `kind` is not the one the bench expects (None: it is)."""
    response = answer.get("response") or {}
    if response.get("allowed") is not True:
        return f"not allowed: {response.get('status')}"
    if kind == "mpod-follower":
        patch = orjson.loads(base64.b64decode(response.get("patch") or "W10="))
        if RACK not in orjson.dumps(patch).decode():
            return f"no nodeSelector {RACK_LABEL}={RACK} in the patch: {patch}"
    return None


async def wait_answers(url: str, bodies: dict[str, bytes], context: ssl.SSLContext) -> None:
    """Until every kind is answered as expected (the controller's caches hold the leader and
    its node), or fail with the last answer."""
    deadline = time.monotonic() + 120
    async with aiohttp.ClientSession() as session:
        for kind, body in bodies.items():
            path = PATHS[kind.split("-")[0]]
            while True:
                async with session.post(
                    url + path,
                    data=body,
                    headers={"Content-Type": "application/json"},
                    ssl=context,
                ) as r:
                    text = await r.read()
                problem = (
                    check_answer(kind, orjson.loads(text)) if r.status == 200 else str(r.status)
                )
                if problem is None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind}: {problem}: {text[:500]!r}")
                await asyncio.sleep(0.2)


# ----------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Key:
    kind: str
    conns: int
    busy: bool
    rate: float  # reviews due per second; 0: closed loop (module docstring)


@dataclass
class Cell:
    reviews_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_us: float
    rss_mib: float
    client_cpu_s: float
    errors: int
    seconds: float
    jobs_s: float | None = None  # busy cells: the reconcile's length


async def cell(
    controller: Controller,
    load: Load,
    window: Callable[[], Any],
) -> Cell:
    await load.open()
    try:
        cpu0 = controller.cpu()
        await load.start()
        jobs_s = await window()
        out = await load.stop()
        cpu = controller.cpu() - cpu0
    finally:
        await load.kill()
    reviews = int(out["reviews"])
    if out.get("first_error"):
        print(f"    errors {out['errors']}: {out['first_error'][:300]}", flush=True)
    return Cell(
        reviews_per_s=reviews / out["seconds"],
        p50_ms=out["p50_ms"],
        p99_ms=out["p99_ms"],
        max_ms=out["max_ms"],
        cpu_us=cpu / reviews * 1e6 if reviews else float("nan"),
        rss_mib=controller.rss() / 2**20,
        client_cpu_s=out["client_cpu_s"],
        errors=int(out["errors"]),
        seconds=out["seconds"],
        jobs_s=jobs_s,
    )


async def measure(
    label: str,
    src: Path,
    args: argparse.Namespace,
    plane: ControlPlane,
    raw: RawClient,
    fixtures: Fixtures,
    certs: Path,
    workdir: Path,
) -> dict[Key, Cell]:
    controller: Controller
    if label == UPSTREAM:
        controller = UpstreamController(
            label, src, plane, workdir, token=scraper_token(plane, workdir), webhook_certs=certs
        )
    else:
        controller = Controller(label, src, plane, workdir, python=args.python, webhook_certs=certs)
    await controller.start()
    results: dict[Key, Cell] = {}
    try:
        url = f"https://127.0.0.1:{controller.webhook_port}"
        context = ssl.create_default_context(cafile=str(plane.ca.pair.cert))
        await wait_answers(url, {k: fixtures.bodies[k] for k in args.kinds}, context)
        await controller.settle()
        bodies = workdir / "bodies"
        bodies.mkdir(exist_ok=True)
        busy_runs = (False, True) if args.busy else (False,)
        for busy in busy_runs:
            for kind in args.kinds:
                body = bodies / f"{kind}.json"
                body.write_bytes(fixtures.bodies[kind])
                loads = [(conns, 0.0) for conns in args.conns]
                if kind.startswith(("mpod", "vpod")):  # the pod path: also at a given rate
                    loads += [(args.rate_conns, rate) for rate in args.rate]
                for conns, rate in loads:
                    load = Load(
                        args.client,
                        url + PATHS[kind.split("-")[0]],
                        plane.ca.pair.cert,
                        body,
                        conns,
                        rate,
                    )
                    if busy:
                        name = f"busy-{kind}-{conns}-{rate:g}".replace(".", "-")
                        window = busy_window(raw, name, args.busy_jobs)
                    else:
                        window = idle_window(args.rate_seconds if rate else args.seconds)
                    result = await cell(controller, load, window)
                    results[Key(kind, conns, busy, rate)] = result
                    print(f"[{label}] {'busy' if busy else 'idle'} {kind} x{conns} "
                          f"rate {rate:g}: {result}", flush=True)  # fmt: skip
                    if busy:
                        await clean(raw)
                        await controller.settle(quiet=1.0, limit=300)
    finally:
        await controller.stop()
    return results


def idle_window(seconds: float) -> Callable[[], Any]:
    async def window() -> None:
        await asyncio.sleep(seconds)

    return window


def busy_window(raw: RawClient, name: str, jobs: int) -> Callable[[], Any]:
    """Create one JobSet of `jobs` Jobs; the window lasts until they all exist."""

    async def window() -> float:
        started = time.perf_counter()
        status, body = await raw.request("POST", JOBSETS.format(ns=NAMESPACE), jobset(name, jobs))
        assert status == 201, body
        path = JOBS.format(ns=NAMESPACE)
        while await count(raw, path) < jobs:
            if time.perf_counter() - started > 600:
                raise TimeoutError(f"{name}: the Jobs never all existed")
            await asyncio.sleep(0.05)
        return time.perf_counter() - started

    return window


async def clean(raw: RawClient) -> None:
    """Delete the busy cells' JobSets, then their Jobs (no garbage collector on this plane)."""
    await raw.delete_collection(JOBSETS.format(ns=NAMESPACE))
    await raw.delete_collection(JOBS.format(ns=NAMESPACE))
    while True:  # polled: the API server offers no event for "the collection is empty"
        if not await count(raw, JOBS.format(ns=NAMESPACE)) and not await count(
            raw, JOBSETS.format(ns=NAMESPACE)
        ):
            return
        await asyncio.sleep(0.1)


# ----------------------------------------------------------------------------- report
def fmt(value: float | None) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs or ours != ours or theirs != theirs:
        return "-"
    return f"{ours / theirs:.2f}x"


def table_order(key: Key) -> tuple[bool, int, float, int]:
    """Idle before busy, the kinds in `KINDS` order, closed loop before the rates."""
    return key.busy, KINDS.index(key.kind), key.rate, key.conns


def report(rounds: dict[str, list[dict[Key, Cell]]], args: argparse.Namespace) -> None:
    """The table and the goals; with more than one round each figure is the median of its
    rounds (hack/bench/rounds.py says why) and the goals show the rounds' p99 spread."""
    results = {label: median_of_rounds(runs, summed=("errors",)) for label, runs in rounds.items()}
    labels = list(results)
    pair = UPSTREAM in labels and len(labels) == 2
    ours = next((label for label in labels if label != UPSTREAM), labels[0])
    load = os.getloadavg()
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at the end "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.seconds:g} s per idle cell; busy: "
        f"while the controller reconciles one JobSet of {args.busy_jobs} Jobs"
        + (
            f"; {args.rounds} rounds, the sides in turn, each figure the median of its rounds"
            if args.rounds > 1
            else ""
        )
        + "\n"
    )
    names = " / ".join(labels)
    print(
        f"| review | conns | load | reviews/s ({names}) | p50 ms | p99 ms | max ms "
        f"| server CPU per review (us) | server RSS (MiB) | client CPU (s) |"
        + (" reviews/s ours/up | p99 ours/up | CPU ours/up |" if pair else "")
    )
    print("|---|---:|---|" + "---:|" * 7 + ("---:|" * 3 if pair else ""))
    keys = sorted(
        {key for by in results.values() for key in by},
        key=table_order,
    )
    for key in keys:
        cells = [results[label].get(key) for label in labels]
        mode = ("busy" if key.busy else "idle") + (f", {key.rate:g}/s due" if key.rate else "")

        def col(attr: str, cells: list[Cell | None] = cells) -> str:
            return " / ".join(fmt(getattr(c, attr)) if c else "-" for c in cells)

        row = (
            f"| {key.kind} | {key.conns} | {mode} | {col('reviews_per_s')} "
            f"| {col('p50_ms')} | {col('p99_ms')} | {col('max_ms')} | {col('cpu_us')} "
            f"| {col('rss_mib')} | {col('client_cpu_s')} |"
        )
        if pair:
            up, us = results[UPSTREAM].get(key), results[ours].get(key)
            ratios = [
                ratio(getattr(us, c) if us else None, getattr(up, c) if up else None)
                for c in ("reviews_per_s", "p99_ms", "cpu_us")
            ]
            row += " " + " | ".join(ratios) + " |"
        print(row)
    if any(key.busy for by in results.values() for key in by):
        print(f"\nbusy cells: seconds until the {args.busy_jobs} Jobs existed (the window):")
        for label in labels:
            spans = [c.jobs_s for key, c in results[label].items() if key.busy and c.jobs_s]
            if spans:
                print(f"  {label}: {min(spans):.2f}-{max(spans):.2f} s over {len(spans)} cells")
    if pair:
        goals(results[UPSTREAM], results[ours], args, rounds[UPSTREAM], rounds[ours])
    errors = {label: sum(c.errors for c in by.values()) for label, by in results.items()}
    print(f"\nreviews not answered as expected in the windows: {errors}")


P99_BOUND = 1.5  # issue 45: p99 at most 1.5x upstream's in every rate cell, busy or idle
WIDE = 256  # issue 45: reviews/s at least upstream's at this many connections


def goals(
    up: dict[Key, Cell],
    us: dict[Key, Cell],
    args: argparse.Namespace,
    up_rounds: list[dict[Key, Cell]],
    us_rounds: list[dict[Key, Cell]],
) -> None:
    """The cells issue 45's goals name, each with its ratio and whether it is met (medians when
    there were rounds, followed by each side's lowest-highest p99 over them)."""
    print(
        f"\ngoals: p99 at each rate <= {P99_BOUND:g}x upstream's (busy or idle); "
        f"reviews/s at {WIDE} connections >= upstream's"
    )
    for key in sorted(up, key=table_order):
        theirs, mine = up[key], us.get(key)
        if mine is None or not (key.rate or key.conns == WIDE):
            continue
        where = f"{'busy' if key.busy else 'idle'} {key.kind}"
        if key.rate:
            within = bool(mine.p99_ms and theirs.p99_ms) and (
                mine.p99_ms <= P99_BOUND * theirs.p99_ms
            )
            spreads = [spread(runs, key, "p99_ms") for runs in (us_rounds, up_rounds)]
            print(
                f"  {where} at {key.rate:g}/s: p99 ours {fmt(mine.p99_ms)} ms / upstream "
                f"{fmt(theirs.p99_ms)} ms = {ratio(mine.p99_ms, theirs.p99_ms)}"
                f"{'' if within else '  OVER'}"
                + (
                    f" (rounds: ours {spreads[0][0]:.3g}-{spreads[0][1]:.3g}, "
                    f"upstream {spreads[1][0]:.3g}-{spreads[1][1]:.3g})"
                    if spreads[0] and spreads[1]
                    else ""
                )
            )
        else:
            enough = mine.reviews_per_s >= theirs.reviews_per_s
            print(
                f"  {where} x{WIDE}: reviews/s ours {fmt(mine.reviews_per_s)} / upstream "
                f"{fmt(theirs.reviews_per_s)} = {ratio(mine.reviews_per_s, theirs.reviews_per_s)}"
                f"{'' if enough else '  SHORT'}"
            )


async def main_async(args: argparse.Namespace) -> None:
    rounds: dict[str, list[dict[Key, Cell]]] = {}  # each side's results, one per round
    fixtures = Fixtures.build()
    with tempfile.TemporaryDirectory(prefix="admission-bench-") as tmp, ControlPlane() as plane:
        certs = Path(tmp) / "certs"
        plane.ca.write_pair(
            certs, "bench-webhook", common_name="webhook", ip_addresses=("127.0.0.1",),
            server=True,
        )  # fmt: skip
        raw = RawClient(plane)
        sources = dict(spec.partition("=")[::2] for spec in args.src)
        try:
            await fixtures.create(raw)
            for index in range(args.rounds):
                for label in side_order(list(sources), index):
                    if args.rounds > 1:
                        print(f"round {index + 1} of {args.rounds}: {label}", flush=True)
                    workdir = Path(tmp) / f"{label}-{index}"
                    workdir.mkdir()
                    result = await measure(
                        label, Path(sources[label]), args, plane, raw, fixtures, certs, workdir
                    )
                    rounds.setdefault(label, []).append(result)
        finally:
            await raw.close()
    report(rounds, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--conns", type=int, nargs="*", default=[1, 16, 64, 256], help="none: only --rate cells"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of an idle cell")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--rate", type=float, nargs="*", default=[], help="pod reviews due per second (open load)"
    )
    parser.add_argument("--rate-conns", type=int, default=64, help="connections of a --rate cell")
    parser.add_argument(
        "--rate-seconds", type=float, default=10.0, help="length of an idle --rate cell"
    )
    parser.add_argument("--no-busy", dest="busy", action="store_false")
    parser.add_argument("--busy-jobs", type=int, default=1000)
    parser.add_argument("--only", choices=("ours", UPSTREAM))
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="measure every cell this many times, the sides in turn; report the medians",
    )  # fmt: skip
    parser.add_argument("--src", action="append", default=[], help="label=path of our src tree")
    add_venv_option(parser)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.python = ours_python(args)
    args.client = load_client()
    if not args.src and args.only != UPSTREAM:
        args.src = [f"ours={ROOT / 'src'}"]
    if args.only != "ours":
        args.src.insert(0, f"{UPSTREAM}={ensure_upstream()}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
