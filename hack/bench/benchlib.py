"""Shared pieces of the controller benchmarks: a tight raw client, a watcher, the controller run
as a child process whose CPU time, RSS and metrics are read from the outside, and the full cluster
of racks the placement and recovery benches share (its flags, its start).

Why a child process: on a shared 2-core machine wall-clock figures swing with the neighbours' load,
while the controller's own CPU time (user+sys from /proc/<pid>/stat), its request counts and its
RSS barely move. Reading them from outside also keeps the bench's own work (creating objects,
watching) out of the figures. Why source trees: `--src before=/tmp/before/src` runs the code of an
earlier commit (a `git worktree`) against the same control plane in the same run, so a before/after
ratio is not skewed by the load of the moment.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from jobset_controller.runtime.http1client import ConnectionPool, Endpoint
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import NODE_LEASE_SECONDS
from jobset_controller_dev.envtest.nodes import NodeSpec, rack_topology
from jobset_controller_dev.envtest.processes import (
    free_port,
    parent_death_signal,
    process_cpu,
    process_rss,
)

TICK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- raw client
def control_plane_cpu(plane: ControlPlane) -> float:
    """CPU seconds of the control plane's kube-apiserver and etcd so far: what a window of
    creates cost the API server, whoever sent them."""
    return sum(process_cpu(p.pid) for p in (plane.apiserver, plane.etcd) if p and p.pid)


class RawClient:
    """The tightest client we can write in Python, the ceiling the controller's creates are
    compared with (what the API server itself sustains): bodies encoded once up front, N
    coroutines pulling from one iterator, each POST sent through the same HTTP/1.1 pool the
    controller uses (runtime/http1client.py, half aiohttp's CPU per request) with nothing around it:
    no token bucket, no metrics, no retries, answers not parsed. Single requests (namespaces,
    deletes, watches) go through an aiohttp session: a client that is not ours."""

    def __init__(self, plane: ControlPlane, limit: int = 100) -> None:
        self._open(plane.server, plane.ca.pair.cert, plane.admin.cert, plane.admin.key, limit)

    @classmethod
    def for_files(cls, server: str, ca: Path, cert: Path, key: Path) -> RawClient:
        """A client of the API server at `server` (another process of the bench: count_watch)."""
        client = cls.__new__(cls)
        client._open(server, ca, cert, key, 100)
        return client

    def _open(self, server: str, ca: Path, cert: Path, key: Path, limit: int) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self.base = server
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=limit),
            timeout=aiohttp.ClientTimeout(total=120),
        )
        self.pool = ConnectionPool(Endpoint.for_url(server, context), limit=limit)

    async def close(self) -> None:
        await self.session.close()
        await self.pool.close()

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = body if body is None or isinstance(body, bytes) else orjson.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(
            method, self.base + path, data=data, headers=headers
        ) as response:
            raw = await response.read()
            return response.status, orjson.loads(raw) if raw else {}

    async def many(
        self,
        method: str,
        requests: Iterable[tuple[str, bytes]],
        in_flight: int = 50,
        content_type: str = "application/json",
    ) -> dict[int, int]:
        """Send (path, encoded body) pairs, `in_flight` at a time; returns counts per status."""
        iterator = iter(requests)
        codes: dict[int, int] = {}
        headers = f"Content-Type: {content_type}\r\n"

        async def worker() -> None:
            for path, body in iterator:
                answer = await self.pool.request(method, path, headers, body, time_limit=120)
                codes[answer.status] = codes.get(answer.status, 0) + 1

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return codes

    async def delete_collection(self, path: str) -> None:
        status, body = await self.request(
            "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                             "propagationPolicy": "Background"}
        )  # fmt: skip
        if status >= 400 and status != 404:
            raise RuntimeError(f"DELETE {path}: {status} {body}")

    async def ensure_namespace(self, name: str) -> None:
        await self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})


# ----------------------------------------------------------------------------- watcher
@dataclass
class Watcher:
    """Follows one collection (list, then watch) and keeps name -> object; `on_event` sees every
    (type, old, new) so a bench can count what changed between two writes."""

    client: RawClient
    path: str
    params: str = ""
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    on_event: Callable[[str, dict[str, Any] | None, dict[str, Any]], None] | None = None
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        """Returns once the list is read and the watch answered 200 (its events flow); raises
        what ended it if it failed first."""
        self._task = asyncio.create_task(self._run())
        await self.until(self._ready)

    async def until(self, event: asyncio.Event) -> None:
        """Wait for `event`; if the watch ends first (it only ends by failing), raise why."""
        assert self._task is not None
        waiter = asyncio.create_task(event.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not event.is_set():
            waiter.cancel()
            self._task.result()
            raise RuntimeError(f"the watch of {self.path} ended")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def raise_if_ended(self) -> None:
        """Raise what ended the watch, if it has ended (it only ends by failing); callable from
        another thread than the watch's loop."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()
            raise RuntimeError(f"the watch of {self.path} ended")

    async def _run(self) -> None:
        sep = "&" if self.params else ""
        status, body = await self.client.request("GET", f"{self.path}?{self.params}")
        assert status == 200, body
        for item in body.get("items") or ():
            self.objects[item["metadata"]["name"]] = item
        rv = body["metadata"]["resourceVersion"]
        while True:
            url = (
                f"{self.client.base}{self.path}?{self.params}{sep}watch=true"
                f"&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3000"
            )
            async with self.client.session.get(
                url, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)
            ) as response:
                if response.status != 200:
                    raise RuntimeError(f"watch {self.path}: {response.status}")
                self._ready.set()
                buffer = b""
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = orjson.loads(line)
                        obj = event["object"]
                        rv = obj["metadata"].get("resourceVersion", rv)
                        kind = event["type"]
                        if kind == "BOOKMARK":
                            continue
                        name = obj["metadata"]["name"]
                        old = self.objects.get(name)
                        if kind == "DELETED":
                            self.objects.pop(name, None)
                        else:
                            self.objects[name] = obj
                        if self.on_event is not None:
                            self.on_event(kind, old, obj)

    async def wait(self, check: Callable[[], bool], limit: float = 900.0) -> float:
        started = time.perf_counter()
        while not check():
            if time.perf_counter() - started > limit:
                raise TimeoutError(f"bench condition on {self.path} not reached")
            await asyncio.sleep(0.02)
        return time.perf_counter() - started


async def count(raw: RawClient, path: str) -> int:
    """Objects in a collection, from one item and the server's remainingItemCount: one cheap
    request whatever the collection's size."""
    status, body = await raw.request("GET", f"{path}?limit=1")
    assert status == 200, body
    items = len(body.get("items") or ())
    return items + int((body.get("metadata") or {}).get("remainingItemCount") or 0)


async def wait_count(raw: RawClient, path: str, want: int, limit: float = 3600.0) -> float:
    """Seconds until the collection holds at least `want` objects (polled every second);
    TimeoutError after `limit` seconds."""
    started = time.perf_counter()
    while await count(raw, path) < want:
        if time.perf_counter() - started > limit:
            raise TimeoutError(f"{path}: fewer than {want}")
        await asyncio.sleep(1.0)
    return time.perf_counter() - started


class CountWatch:
    """A watch in a process of its own (count_watch.py) that reports the moment it has seen
    `count` objects of one collection: the instrument both sides of a comparison are timed
    with. In its own process, it takes no turn of the measured client's event loop (a raw
    client watching from its own loop would be slowed by its instrument, and a controller
    measured from the bench's process would not); the API server serves it and the machine
    runs it alike for both."""

    def __init__(self, plane: ControlPlane, path: str, count: int) -> None:
        self.argv = [
            sys.executable, str(Path(__file__).with_name("count_watch.py")),
            plane.server, str(plane.ca.pair.cert), str(plane.admin.cert), str(plane.admin.key),
            path, str(count),
        ]  # fmt: skip
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Spawn it; returns once its list is done and its watch is open."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": ":".join(sys.path)},
            preexec_fn=parent_death_signal(),  # never outlives the bench
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"count_watch: {line!r}")

    async def seen(self, limit: float = 900.0) -> float:
        """The time.perf_counter() (CLOCK_MONOTONIC, the same in every process) at which it
        had seen `count` objects."""
        assert self.proc is not None
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), limit)
        code = await self.proc.wait()
        kind, _, value = line.decode().partition(" ")
        if kind != "seen":
            raise RuntimeError(f"count_watch exited {code}: {line!r}")
        return float(value)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


# ----------------------------------------------------------------------------- controller
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# Prometheus text parsed: (metric name, its labels) -> value.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match:
            name, labels, value = match.groups()
            samples[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return samples


def schedule_attempts(samples: Samples) -> dict[str, float]:
    """kube-scheduler's `scheduler_schedule_attempts_total` by result, summed over its profiles:
    how often it tried to place a pod, and how each try ended. Takes `parse_metrics`' result, so
    a caller that reads more of the same text parses it once."""
    out: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == "scheduler_schedule_attempts_total":
            result = dict(labels).get("result", "")
            out[result] = out.get(result, 0.0) + value
    return out


class Controller:
    """`python -m jobset_controller run` from one source tree, as a child process."""

    def __init__(
        self,
        label: str,
        src: Path,
        plane: ControlPlane,
        workdir: Path,
        *,
        workers: int = 4,
        log_level: str = "info",
        profile: Path | None = None,
        python: Path | None = None,
        extra_args: Sequence[str] = (),
        config: str = "",
        webhook_certs: Path | None = None,
    ) -> None:
        """`config`: YAML lines added to the Configuration file (e.g. a `featureGates` map).
        `webhook_certs`: a directory holding tls.crt and tls.key that the webhook server serves
        (internal certificate management off), so that a bench can trust it and give another
        server the same pair; by default internal certificate management issues one."""
        self.label, self.src, self.plane = label, src, plane
        self.config = config
        self.extra_args = list(extra_args)
        self.python = str(python or sys.executable)
        self.workers, self.log_level = workers, log_level
        self.log_path = workdir / f"controller-{label}-{time.monotonic_ns()}.log"
        self.metrics_port, self.health_port = free_port(), free_port()
        self.webhook_port, self.webhook_certs = free_port(), webhook_certs
        self.profile = profile
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self._http: aiohttp.ClientSession | None = None

    async def start(self, limit: float = 300.0) -> float:
        """Start; returns the seconds from spawning the process to /readyz answering 200."""
        env = {**os.environ, "PYTHONPATH": str(self.src)}
        # Byte-compile the tree first, as `pip install` does for the image: a process that
        # compiles its own source at every start (PYTHONDONTWRITEBYTECODE=1 on the development
        # machines) spends ~0.05-0.1 s on it that no deployed controller spends.
        subprocess.run([self.python, "-m", "compileall", "-q", str(self.src)], check=True)  # noqa: ASYNC221
        cli = (self.src / "jobset_controller" / "cli.py").read_text()
        # The webhook on a port of its own (internal certificate management fills certDir), so
        # two controllers of one run, or another process on :9443, never compete for it.
        config = self.log_path.with_suffix(".config.yaml")
        certs = self.webhook_certs or config.parent / "no-certs"
        given = "internalCertManagement:\n  enable: false\n" if self.webhook_certs else ""
        config.write_text(
            "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n"
            f"webhook:\n  certDir: {certs}\n  host: 127.0.0.1\n"
            f"  port: {self.webhook_port}\n" + given + self.config
        )
        args = [
            self.python, "-m", "jobset_controller", "run",
            f"--kubeconfig={self.plane.kubeconfig}", "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            f"--config={config}",
            *(["--metrics-secure=false"] if "--metrics-secure" in cli else []),
            f"--workers={self.workers}", f"--zap-log-level={self.log_level}", "--log-format=json",
            *self.extra_args,
        ]  # fmt: skip
        if self.profile is not None:  # py-spy (pip install py-spy) samples the controller
            out = self.profile / f"{self.label}-{time.monotonic_ns()}.txt"
            rate = os.environ.get("PYSPY_RATE", "250")  # samples per second
            args = ["py-spy", "record", "--gil", "--format", "raw", "--rate", rate, "-o", str(out),
                    "--", *args]  # fmt: skip
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log, cwd="/")  # noqa: ASYNC220
        self.pid = self.proc.pid
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"controller exited: {self.log_path.read_text()[-3000:]}")
            try:
                async with self._http.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                    if r.status == 200:
                        took = time.perf_counter() - started
                        if self.profile is not None:  # measure the controller, not py-spy
                            children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
                            self.pid = int(children.read_text().split()[0])  # noqa: ASYNC240
                        return took
            except (aiohttp.ClientError, TimeoutError):
                pass
            if time.perf_counter() - started > limit:
                raise TimeoutError("controller not ready")
            await asyncio.sleep(0.005)

    def cpu(self) -> float:
        """User + system CPU seconds of the process so far."""
        return process_cpu(self.pid)

    def rss(self) -> int:
        return process_rss(self.pid)

    async def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        assert self._http is not None
        async with self._http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as r:
            return parse_metrics(await r.text())

    async def requests(self) -> dict[str, float]:
        """API requests so far per method, and per answer code as "code:<code>"
        (rest_client_requests_total)."""
        out: dict[str, float] = {}
        for (name, labels), value in (await self.metrics()).items():
            if name == "rest_client_requests_total":
                for key in (dict(labels)["method"], "code:" + dict(labels)["code"]):
                    out[key] = out.get(key, 0.0) + value
        return out

    async def passes(self) -> float:
        """Reconcile passes of the JobSet controller so far (controller_runtime_reconcile_total)."""
        return sum(
            value
            for (name, labels), value in (await self.metrics()).items()
            if name == "controller_runtime_reconcile_total"
            and dict(labels).get("controller") == "jobset"
        )

    async def lag_buckets(self) -> dict[float, float]:
        """The loop-lag histogram's cumulative buckets (le -> count)."""
        out = {}
        for (name, labels), value in (await self.metrics()).items():
            if name == "jobset_event_loop_lag_distribution_seconds_bucket":
                out[float(dict(labels)["le"])] = value
        return out

    def blocked_warnings(self) -> list[float]:
        """Lags above 1 s, from the controller's 'event loop was blocked' lines."""
        out = []
        for line in self.log_path.read_bytes().splitlines():
            if b"event loop was blocked" in line:
                out.append(float(orjson.loads(line).get("lag_seconds", 0)))
        return out

    def log_lines(self) -> int:
        return len(self.log_path.read_bytes().splitlines())

    async def settle(self, quiet: float = 1.0, limit: float = 600.0) -> float:
        """Wait until the process used at most one clock tick of CPU over `quiet` seconds twice
        in a row (its work is done); returns its CPU seconds at that point."""
        deadline = time.perf_counter() + limit
        calm = 0
        last = self.cpu()
        while calm < 2:
            await asyncio.sleep(quiet / 2)
            now = self.cpu()
            calm = calm + 1 if now - last <= 1.5 / TICK else 0
            last = now
            if time.perf_counter() > deadline:
                raise TimeoutError("controller never went quiet")
        return last

    async def stop(self) -> int:
        if self._http is not None:
            await self._http.close()
        if self.proc is None:
            return 0
        os.kill(self.pid, signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def worst_lag(before: dict[float, float], after: dict[float, float]) -> float:
    """Upper bound of the worst lag observed between two histogram readings (a bucket bound)."""
    total = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    for bound in sorted(after):
        if after[bound] - before.get(bound, 0.0) >= total:
            return bound
    return float("inf")


def parse_src(values: list[str]) -> list[tuple[str, Path]]:
    """`label=path` pairs; a bare path is labelled by its position."""
    out = []
    for index, value in enumerate(values):
        label, sep, path = value.partition("=")
        out.append((label, Path(path)) if sep else (f"src{index}", Path(value)))
    return out


async def timed(coro: Awaitable[Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await coro
    return time.perf_counter() - started, result


# ----------------------------------------------------------------------------- the full cluster
def add_cluster_arguments(
    parser: argparse.ArgumentParser, *, racks: int, nodes: int, pods: int, profiled: str
) -> None:
    """The flags of the benches on the full cluster of racks (placement_bench, recovery_bench):
    its size, kwok's node Lease, `--no-upstream` and `--profile SECONDS` (over `profiled`
    SECONDS of each run)."""
    parser.add_argument("--racks", type=int, default=racks)
    parser.add_argument("--nodes", type=int, default=nodes, help="nodes per rack")
    parser.add_argument("--pods", type=int, default=pods, help="pods per Job")
    parser.add_argument(
        "--nodes-total",
        type=int,
        help="N / 20 racks of 20 nodes, 15 pods per Job (upstream's scale, "
        "kubernetes-sigs/jobset#174)",
    )
    parser.add_argument(
        "--node-lease",
        type=int,
        help=f"kwok's node Lease seconds (default 600 above 1000 nodes, else {NODE_LEASE_SECONDS})",
    )
    parser.add_argument("--no-upstream", dest="upstream", action="store_false")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="SECONDS",
        help=f"profile kube-scheduler's and kube-controller-manager's CPU over {profiled} "
        "SECONDS (go tool pprof)",
    )


def start_rack_cluster(
    args: argparse.Namespace, workdir: Path
) -> tuple[FullCluster, list[NodeSpec], int]:
    """The full cluster of `add_cluster_arguments`' size, started: `--nodes-total N` first turned
    into N / 20 racks of 20 nodes and 15 pods per Job (`args` changed), one rack per topology
    domain over 4 zones, no GPUs. kwok's node Lease is `--node-lease`, else 600 s above 1000
    nodes (5000 nodes renew about 33 Leases a second instead of 500 with the 40 s default), and
    kube-controller-manager's node grace period twice the Lease (FullCluster's
    `node_lease_seconds`). Returns the cluster, its node specs and the Lease."""
    if args.nodes_total:
        args.nodes = 20
        args.racks = args.nodes_total // args.nodes
        args.pods = 15
    count = args.racks * args.nodes
    lease = int(args.node_lease or (600 if count > 1000 else NODE_LEASE_SECONDS))
    began = time.monotonic()
    nodes = rack_topology(racks=args.racks, nodes_per_rack=args.nodes, zones=4, gpus=0)
    cluster = FullCluster(
        nodes=nodes, workdir=workdir / "cluster", node_lease_seconds=lease
    ).start()
    print(
        f"cluster with {len(nodes)} kwok nodes in {args.racks} racks up in "
        f"{time.monotonic() - began:.1f} s (node Lease {lease} s)",
        file=sys.stderr,
    )
    return cluster, nodes, lease
