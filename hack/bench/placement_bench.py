"""Benchmark: exclusive placement strategies on the full local cluster (numbers and ratios).

One full cluster (etcd, apiserver, controller-manager, scheduler, kwok) with RACKS x NODES kwok
nodes, one rack per topology domain. For each strategy, in its own namespace and with its own
controller: one JobSet with one Job per rack and PODS pods per Job (pods run forever), posted
already defaulted (no JobSet webhook is registered for either controller). Measured:

- pods/s: pods / seconds from the JobSet create to every pod bound;
- API requests made by every client during that time (apiserver_request_total, the bench's own
  polls and scrapes subtracted), split by client where the client counts its own
  (rest_client_requests_total of the controller, kube-controller-manager and kube-scheduler;
  "other" is the rest: kwok's), and pod creates refused (non-2xx POST pods: rejected followers);
- the API server's latency of each pod webhook (apiserver_admission_webhook_admission_duration
  _seconds, p50 and p99 interpolated in its buckets, so coarse: 5, 25, 100, 500 ms, ...);
- the controller's CPU over that time and its RSS at the end; each cluster component's CPU
  over that time (where the time went) and kube-scheduler's scheduling attempts by result;
- restart: a pod is deleted (its Job fails, backoffLimit 0), the JobSet restarts and recreates
  every Job; seconds until every pod of the new attempt is bound.

Strategies: none (no exclusive placement: the ceiling), affinity (affinity in every pod template:
our controller without pod webhooks), reject (leader/follower, rejected followers), gate (ours:
followers wait behind a scheduling gate), node-selector (nodes labelled per Job beforehand),
narrow (ours: reject with `exclusivePlacement.followerNodeAffinity`, followers naming their
rack's nodes).
With `--upstream` (the default; `--no-upstream` to skip), upstream's controller v0.12.0
(hack/upstream-jobset.sh) runs none, reject (its pod webhooks, registered by URL as ours are)
and node-selector after ours, on the same cluster, with the same client budget (QPS 500, burst
500). Also printed: the memory of one cached pod, full and trimmed, and what the idle cluster
costs (RSS and CPU of each component over `--idle` seconds before the first strategy).

`--nodes-total N` is the scale upstream measured its placement at (kubernetes-sigs/jobset#174):
N / 20 racks of 20 nodes, 15 pods per Job. kwok's node Leases are then renewed every
`--node-lease` / 4 seconds (default 600 s at more than 1000 nodes: 5000 nodes renew about 33
Leases a second instead of 500 with the 40 s default), and kube-controller-manager's node grace
period is twice the Lease (FullCluster's `node_lease_seconds`).

Run: JOBSET_K8S_BIN=... .venv/bin/python hack/bench/placement_bench.py [--racks 32 --pods 8]
     [--nodes-total 5000] [--only none reject ...] [--no-upstream] [--no-restart]
     [--profile SECONDS]: kube-scheduler's and kube-controller-manager's CPU profiles (Go's
     pprof on their secure ports) over each strategy's first SECONDS, their top printed by `go
     tool pprof`.
"""

from __future__ import annotations

import argparse
import http.client
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

from benchlib import (
    Samples,
    add_cluster_arguments,
    parse_metrics,
    schedule_attempts,
    start_rack_cluster,
)

from jobset_controller.api import JobSet, default_jobset
from jobset_controller.api.constants import (
    EXCLUSIVE_KEY,
    JOBSET_NAME_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    RESTARTS_KEY,
)
from jobset_controller.controller.pods import trim_pod
from jobset_controller.webhook.pods import MUTATE_POD_PATH, VALIDATE_POD_PATH
from jobset_controller_dev.envtest.controller import write_configuration
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import RUN_FOREVER_ANNOTATION
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import NAMESPACED_JOB_LABEL, RACK_LABEL
from jobset_controller_dev.envtest.placement import (
    MUTATING_NAME,
    VALIDATING_NAME,
    PlacementController,
)
from jobset_controller_dev.envtest.processes import free_port, process_cpu, process_rss
from jobset_controller_dev.envtest.upstream import UpstreamController, ensure_upstream
from jobset_controller_dev.envtest.webhooks import MUTATING, VALIDATING, pod_webhook_configuration

EXCLUSIVE = EXCLUSIVE_KEY
NODE_SELECTOR = NODE_SELECTOR_STRATEGY_KEY
JOBSET_NAME = JOBSET_NAME_KEY
ATTEMPT = RESTARTS_KEY
OURS, UPSTREAM = "ours", "upstream"
STRATEGIES = ("none", "affinity", "reject", "gate", "node-selector", "narrow")
UPSTREAM_STRATEGIES = ("none", "reject", "node-selector")
WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")


@dataclass
class Row:
    controller: str
    name: str
    seconds: float = 0.0
    pods_per_second: float = 0.0
    requests: float = 0.0
    rejected_creates: float = 0.0
    restart_seconds: float = 0.0
    by_client: dict[str, float] = field(default_factory=dict)
    webhook_ms: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    cpu_s: float = 0.0
    rss_mib: float = 0.0
    # CPU seconds of each cluster component over the window: where the time went.
    component_cpu: dict[str, float] = field(default_factory=dict)
    # kube-scheduler's scheduling attempts by result over the window.
    attempts: dict[str, float] = field(default_factory=dict)
    # CPU profiles (component -> file) over the window's first --profile seconds.
    profiles: dict[str, Path] = field(default_factory=dict)


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for (name, labels), value in parse_metrics(text).items():
        yield name, dict(labels), value


def resident_mib(pid: int) -> float:
    return process_rss(pid) / 2**20


class Scraper:
    """/metrics of the API server (through the cluster's client), of kube-controller-manager and
    kube-scheduler (their secure ports, as the admin), and of the controller under test; counts
    the API requests its own reads cost, so that they are subtracted."""

    def __init__(self, cluster: FullCluster) -> None:
        self.cluster = cluster
        self.polls = 0
        self.context = ssl.create_default_context(cafile=str(cluster.ca.pair.cert))
        self.context.load_cert_chain(str(cluster.admin.cert), str(cluster.admin.key))

    def apiserver(self) -> str:
        """Not a resource request: apiserver_request_total's resource series never count it."""
        _, body = self.cluster.request("GET", "/metrics")
        return str(body.get("raw", ""))

    def component(self, port: int, path: str = "/metrics", timeout: float = 30.0) -> bytes:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=self.context, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path} on port {port}: {response.status} {body[:200]!r}")
            return body
        finally:
            conn.close()

    def profile(self, port: int, seconds: int, out: Path) -> threading.Thread:
        """A component's CPU profile (Go's pprof, on by default on kube-scheduler's and
        kube-controller-manager's secure ports) over the next `seconds`, written to `out` by a
        thread: where that component's time goes."""

        def fetch() -> None:
            path = f"/debug/pprof/profile?seconds={seconds}"
            out.write_bytes(self.component(port, path, seconds + 60.0))

        thread = threading.Thread(target=fetch, name=f"profile {out.name}", daemon=True)
        thread.start()
        return thread

    def profile_components(
        self, seconds: int, stem: Path, files: dict[str, Path]
    ) -> list[threading.Thread]:
        """kube-scheduler's and kube-controller-manager's CPU profiles over the next `seconds`,
        each to `<stem>-<component>.pprof` (entered in `files` by component): the threads that
        write them."""
        threads = []
        for component, port in (
            ("kube-scheduler", self.cluster.scheduler_port),
            ("kube-controller-manager", self.cluster.controller_manager_port),
        ):
            files[component] = stem.with_name(f"{stem.name}-{component}.pprof")
            threads.append(self.profile(port, seconds, files[component]))
        return threads

    def reading(self, subject: Subject) -> dict[str, Any]:
        """Cumulative counts now: every client's requests, refused pod creates, webhook latency
        buckets, each client's own request counts, the controller's CPU."""
        out: dict[str, Any] = {"total": 0.0, "rejected": 0.0, "buckets": {}, "clients": {}}
        for name, labels, value in samples(self.apiserver()):
            if name == "apiserver_request_total" and labels.get("resource"):
                out["total"] += value
                if (
                    labels.get("resource") == "pods"
                    and labels.get("verb") == "POST"
                    and not labels.get("code", "").startswith("2")
                ):
                    out["rejected"] += value
            elif name == "apiserver_admission_webhook_admission_duration_seconds_bucket":
                key = (labels.get("name", ""), float(labels["le"]))
                out["buckets"][key] = out["buckets"].get(key, 0.0) + value
        out["clients"]["kube-controller-manager"] = rest_requests(
            parse_metrics(self.component(self.cluster.controller_manager_port).decode())
        )
        scheduler = parse_metrics(self.component(self.cluster.scheduler_port).decode())
        out["clients"]["kube-scheduler"] = rest_requests(scheduler)
        out["attempts"] = schedule_attempts(scheduler)
        out["components"] = {
            p.name: process_cpu(p.pid)
            for p in self.cluster.component_processes()
            if p.pid is not None
        }
        out["clients"]["controller"] = rest_requests(parse_metrics(subject.metrics()))
        out["cpu"] = process_cpu(subject.pid)
        return out


def rest_requests(samples: Samples) -> float:
    """A Kubernetes client's own count of its requests, from `parse_metrics`' result."""
    return sum(v for (name, _), v in samples.items() if name == "rest_client_requests_total")


def quantile(buckets: dict[float, float], q: float) -> float:
    """The q-quantile of a cumulative histogram (le -> count), interpolated linearly within
    its bucket, as Prometheus's histogram_quantile does."""
    bounds = sorted(buckets)
    total = buckets.get(float("inf"), 0.0)
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


# ----------------------------------------------------------------------------- subjects
class Subject:
    """A controller under test, running: its pid, /metrics, and how many API requests one
    scrape of its /metrics costs (upstream's filter asks for a TokenReview and a
    SubjectAccessReview)."""

    pid: int
    scrape_requests = 0

    def metrics(self) -> str:
        raise NotImplementedError


class Ours(Subject):
    def __init__(self, controller: PlacementController, port: int) -> None:
        assert controller.process is not None
        self.pid = controller.process.proc.pid
        self.port = port

    def metrics(self) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()


class Upstream(Subject):
    scrape_requests = 2

    def __init__(self, controller: UpstreamController, token: str) -> None:
        pid = controller.process.pid
        assert pid is not None
        self.pid = pid
        self.port = controller.metrics_port
        self.token = token

    def metrics(self) -> str:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # its self-signed metrics certificate, on loopback
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=30)
        try:
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {self.token}"})
            return conn.getresponse().read().decode()
        finally:
            conn.close()


@contextmanager
def ours(
    cluster: FullCluster,
    workdir: Path,
    followers: str | None,
    sections: Mapping[str, Any] | None = None,
) -> Iterator[Subject]:
    """`sections`: more of the Configuration (featureGates, earlyJobConditions, ...)."""
    port = free_port()
    with PlacementController(
        cluster, workdir, followers, metrics_port=port, sections=sections
    ) as controller:
        yield Ours(controller, port)


@contextmanager
def upstream(
    cluster: FullCluster,
    workdir: Path,
    webhooks: bool,
    bin_dir: Path,
    token: str,
    feature_gates: Mapping[str, bool] | None = None,
) -> Iterator[Subject]:
    """Upstream's manager as a host process: leader election off, QPS 500 / burst 500, its
    webhook server on 127.0.0.1 with a pair from the cluster's CA, `feature_gates` in its
    Configuration's featureGates, and with `webhooks` its two pod webhooks registered by URL
    under the names ours use (upstream's own names)."""
    certs = workdir / "upstream-certs"
    cluster.ca.write_pair(
        certs, "upstream-webhook", common_name="upstream-webhook",
        ip_addresses=("127.0.0.1",), server=True,
    )  # fmt: skip
    port = free_port()
    config = write_configuration(
        workdir / "upstream-config.yaml",
        {
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"qps": 500, "burst": 500},
            **({"featureGates": dict(feature_gates)} if feature_gates else {}),
        },
    )
    if webhooks:
        base, ca = f"https://127.0.0.1:{port}", cluster.ca.cert_pem
        for path, body in (
            (MUTATING, pod_webhook_configuration(MUTATING_NAME, "mpod.kb.io",
                                                 base + MUTATE_POD_PATH, ca)),
            (VALIDATING, pod_webhook_configuration(VALIDATING_NAME, "vpod.kb.io",
                                                   base + VALIDATE_POD_PATH, ca)),
        ):  # fmt: skip
            status, reply = cluster.request("POST", path, body)
            assert status == 201, reply
    controller = UpstreamController(
        bin_dir,
        kubeconfig=cluster.kubeconfig,
        config=config,
        log=workdir / "upstream.log",
        args=["--leader-elect=false", "--zap-log-level=info"],
    )
    try:
        controller.wait_ready(120)
        yield Upstream(controller, token)
    finally:
        cluster.request("DELETE", f"{MUTATING}/{MUTATING_NAME}")
        cluster.request("DELETE", f"{VALIDATING}/{VALIDATING_NAME}")
        controller.stop(60)


# ----------------------------------------------------------------------------- one strategy
def jobset(
    name: str,
    racks: int,
    pods: int,
    annotations: dict[str, str],
    *,
    failure_policy: Mapping[str, Any] | None = None,
    backoff_limit: int = 0,
    pod_annotations: Mapping[str, str] | None = None,
    pod_spec: Mapping[str, Any] | None = None,
    job: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One Job per rack of `pods` pods that run forever (kwok), the JobSet annotated with
    `annotations`, `failure_policy` (default maxRestarts 1), `pod_annotations` and `pod_spec`
    added to the pod template and `job` to the Job's spec. Posted already defaulted: no JobSet
    webhook is registered, and upstream's reconciler expects the defaults its webhook would have
    set."""
    workers = replicated_job(
        "w",
        racks,
        pods=pods,
        backoff_limit=backoff_limit,
        annotations={RUN_FOREVER_ANNOTATION: "true", **(pod_annotations or {})},
        pod_spec=pod_spec,
    )
    workers["template"]["spec"].update(job or {})
    manifest = jobset_manifest(
        name,
        replicated_jobs=[workers],
        annotations=annotations,
        failurePolicy=dict(failure_policy or {"maxRestarts": 1}),
    )
    manifest["spec"] = default_jobset(JobSet.model_validate(manifest)).to_dict()["spec"]
    return manifest


def bound_pods(cluster: FullCluster, scraper: Scraper, ns: str, attempt: str) -> list[Any]:
    """The live pods of `attempt` that are bound to a node (one list, by field selector)."""
    scraper.polls += 1
    query = urlencode({"labelSelector": f"{ATTEMPT}={attempt}", "fieldSelector": "spec.nodeName!="})
    status, body = cluster.request("GET", f"/api/v1/namespaces/{ns}/pods?{query}")
    assert status == 200, body
    return [p for p in body.get("items") or () if not p["metadata"].get("deletionTimestamp")]


def wait_bound(
    cluster: FullCluster, scraper: Scraper, ns: str, count: int, attempt: str, timeout: float
) -> list[dict[str, Any]]:
    """Polled (a list per poll, counted as the bench's own requests): every 0.2 s, or every
    second at thousands of pods, whose lists cost the API server and the bench more."""
    interval = 0.2 if count <= 1000 else 1.0
    deadline = time.monotonic() + timeout
    while True:
        pods = bound_pods(cluster, scraper, ns, attempt)
        if len(pods) >= count:
            return pods
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}: {len(pods)}/{count} pods bound after {timeout} s")
        time.sleep(interval)


def wait_no_jobset_pods(cluster: FullCluster) -> None:
    """The previous strategy's pods are gone (their anti-affinity spans namespaces)."""
    deadline = time.monotonic() + 900
    while cluster.list_items("/api/v1/pods", label_selector=JOBSET_NAME):
        if time.monotonic() > deadline:
            raise TimeoutError("pods of the previous strategy are still there")
        time.sleep(1.0)


def run_strategy(
    cluster: FullCluster,
    start: Callable[[Path], Any],
    workdir: Path,
    label: str,
    name: str,
    annotations: dict[str, str],
    args: argparse.Namespace,
    prepare: Callable[[str], None] = lambda ns: None,
) -> tuple[Row, list[dict[str, Any]]]:
    racks, pods = args.racks, args.pods
    wait_no_jobset_pods(cluster)
    ns = cluster.create_namespace(f"bench-{label}-{name}")
    prepare(ns)
    scraper = Scraper(cluster)
    total = racks * pods
    timeout = max(600.0, total / 2)
    row = Row(label, name)
    strategy_dir = workdir / f"{label}-{name}"
    strategy_dir.mkdir()
    with start(strategy_dir) as subject:
        before = scraper.reading(subject)
        polls = scraper.polls
        began = time.monotonic()
        status, reply = cluster.request(
            "POST",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
            jobset("bench", racks, pods, annotations),
        )
        assert status == 201, reply
        profiling = []
        if args.profile:
            profiling = scraper.profile_components(
                args.profile, args.profile_dir / f"{label}-{name}", row.profiles
            )
        placed = wait_bound(cluster, scraper, ns, total, "0", timeout=timeout)
        row.seconds = time.monotonic() - began
        # The bench's own resource requests in the window: its pod lists, the JobSet create,
        # and what the first reading's scrape of the controller cost (upstream: a TokenReview
        # and a SubjectAccessReview).
        own = scraper.polls - polls + 1 + subject.scrape_requests
        after = scraper.reading(subject)
        row.pods_per_second = total / row.seconds
        row.requests = after["total"] - before["total"] - own
        row.rejected_creates = after["rejected"] - before["rejected"]
        row.cpu_s = after["cpu"] - before["cpu"]
        row.rss_mib = resident_mib(subject.pid)
        for client, value in after["clients"].items():
            row.by_client[client] = value - before["clients"][client]
        for component, value in after["components"].items():
            row.component_cpu[component] = value - before["components"].get(component, 0.0)
        for result, value in after["attempts"].items():
            row.attempts[result] = value - before["attempts"].get(result, 0.0)
        row.by_client["other"] = row.requests - sum(row.by_client.values())
        for webhook in WEBHOOKS:
            buckets = {
                le: value - before["buckets"].get((hook, le), 0.0)
                for (hook, le), value in after["buckets"].items()
                if hook == webhook
            }
            if buckets.get(float("inf")):
                row.webhook_ms[webhook] = (
                    quantile(buckets, 0.5) * 1000,
                    quantile(buckets, 0.99) * 1000,
                    buckets[float("inf")],
                )
        if args.restart:
            victim = placed[0]["metadata"]["name"]
            began = time.monotonic()
            cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{victim}")
            wait_bound(cluster, scraper, ns, total, "1", timeout=timeout)
            row.restart_seconds = time.monotonic() - began
        for thread in profiling:
            thread.join()
        cluster.delete_namespace(ns)
    print(
        f"  {label} {name}: {row.seconds:.1f} s, restart {row.restart_seconds:.1f} s, "
        f"{row.by_client}, webhooks {row.webhook_ms}",
        file=sys.stderr,
        flush=True,
    )
    return row, placed


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by a parsed JSON object (dicts, lists, strings, numbers), shared parts once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list):
        size += sum(deep_size(v, seen) for v in obj)
    return size


def idle_cost(cluster: FullCluster, seconds: float) -> list[tuple[str, float, float]]:
    """(component, RSS MiB, CPU cores) of each process of the cluster over `seconds` at rest."""
    procs = [(p.name, p.pid) for p in cluster.component_processes() if p.pid is not None]
    cpu0 = {pid: process_cpu(pid) for _, pid in procs}
    time.sleep(seconds)
    return [
        (name, resident_mib(pid), (process_cpu(pid) - cpu0[pid]) / seconds) for name, pid in procs
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_cluster_arguments(parser, racks=32, nodes=8, pods=8, profiled="each strategy's first")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds the idle cost is read")
    parser.add_argument(
        "--only",
        nargs="*",
        choices=STRATEGIES,
        default=list(STRATEGIES),
        help="strategies, run in the order given",
    )
    parser.add_argument("--no-restart", dest="restart", action="store_false")
    args = parser.parse_args()
    upstream_bin = ensure_upstream() if args.upstream else None
    workdir = Path(tempfile.mkdtemp(prefix="placement-bench-"))
    args.profile_dir = Path(tempfile.mkdtemp(prefix="placement-profiles-"))
    cluster, nodes, lease = start_rack_cluster(args, workdir)
    racks = args.racks
    rows: list[Row] = []
    sample: list[dict[str, Any]] = []
    idle: list[tuple[str, float, float]] = []
    try:
        idle = idle_cost(cluster, args.idle)
        token = ""
        if upstream_bin is not None:
            from upstreamlib import scraper_token  # the bench directory is on sys.path

            token = scraper_token(cluster, workdir)
        rack_nodes: dict[str, list[str]] = {}
        for spec in nodes:
            rack_nodes.setdefault(spec.labels[RACK_LABEL], []).append(spec.name)

        def label_per_job(ns: str) -> None:
            for index in range(racks):
                cluster.label_nodes(
                    rack_nodes[f"rack-{index}"], {NAMESPACED_JOB_LABEL: f"{ns}_bench-w-{index}"}
                )

        exclusive = {EXCLUSIVE: RACK_LABEL}
        plans: dict[str, tuple[str | None, dict[str, str], Callable[[str], None]]] = {
            "none": (None, {}, lambda ns: None),
            "affinity": (None, exclusive, lambda ns: None),
            "reject": ("Reject", exclusive, lambda ns: None),
            "gate": ("Gate", exclusive, lambda ns: None),
            "node-selector": (None, {**exclusive, NODE_SELECTOR: "true"}, label_per_job),
            "narrow": ("Reject", exclusive, lambda ns: None),
        }
        # narrow: reject with followers named their rack's nodes (followerNodeAffinity)
        narrowing = {"exclusivePlacement": {"followers": "Reject", "followerNodeAffinity": True}}
        for name in args.only:  # in the order given: a long run measures the first ones first
            followers, annotations, prepare = plans[name]
            sections = narrowing if name == "narrow" else None

            def start_ours(
                d: Path,
                followers: str | None = followers,
                sections: Mapping[str, Any] | None = sections,
            ) -> Any:
                return ours(cluster, d, followers, sections)

            row, placed = run_strategy(
                cluster, start_ours, workdir, OURS, name, annotations, args, prepare
            )
            rows.append(row)
            if name == "gate":
                sample = placed
            if upstream_bin is not None and name in UPSTREAM_STRATEGIES:

                def start_upstream(
                    d: Path, webhooks: bool = name == "reject", bin_dir: Path = upstream_bin
                ) -> Any:
                    return upstream(cluster, d, webhooks, bin_dir, token)

                row, _ = run_strategy(
                    cluster, start_upstream, workdir, UPSTREAM, name, annotations, args, prepare
                )
                rows.append(row)
    finally:
        cluster.stop()
        print_table(rows, args, len(nodes), lease, idle)  # what was measured, even if cut short
        print_profiles(rows)
    if sample:
        full = sum(deep_size(p) for p in sample) / len(sample)
        trimmed = sum(deep_size(trim_pod(p)) for p in sample) / len(sample)
        print(
            f"\nmemory per cached pod (parsed JSON): full {full / 1024:.1f} KiB, "
            f"trimmed {trimmed / 1024:.1f} KiB ({trimmed / full:.0%})"
        )


def print_table(
    rows: list[Row],
    args: argparse.Namespace,
    nodes: int,
    lease: int,
    idle: list[tuple[str, float, float]],
) -> None:
    racks, pods = args.racks, args.pods
    load = os.getloadavg()
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at the end "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}: {racks} Jobs x {pods} pods = "
        f"{racks * pods} pods on {nodes} kwok nodes in {racks} racks (node Lease {lease} s)\n"
    )
    if idle:
        print("the idle cluster (RSS MiB, CPU cores): " + ", ".join(
            f"{name} {rss:.0f} / {cpu:.2f}" for name, rss, cpu in idle
        ) + "\n")  # fmt: skip
    if not rows:
        return
    ceiling = next((r for r in rows if r.name == "none" and r.controller == OURS), rows[0])
    print(f"x ceiling: of {ceiling.controller} {ceiling.name}'s pods/s\n")
    print(
        "| controller | strategy | seconds | pods/s | x ceiling | API requests (controller / "
        "kcm / scheduler / other) | refused pod creates | mpod p50 / p99 ms | vpod p50 / p99 ms "
        "| controller CPU s | RSS MiB | restart: s to all bound |"
    )
    print("|---|---|---:|---:|---:|---|---:|---|---|---:|---:|---:|")
    for row in rows:
        clients = " / ".join(
            f"{row.by_client.get(k, 0):.0f}"
            for k in ("controller", "kube-controller-manager", "kube-scheduler", "other")
        )
        hooks = [
            "{:.0f} / {:.0f}".format(*row.webhook_ms[w][:2]) if w in row.webhook_ms else "-"
            for w in WEBHOOKS
        ]
        print(
            f"| {row.controller} | {row.name} | {row.seconds:.1f} | {row.pods_per_second:.1f} | "
            f"{row.pods_per_second / ceiling.pods_per_second:.2f} | {row.requests:.0f} "
            f"({clients}) | {row.rejected_creates:.0f} | {hooks[0]} | {hooks[1]} | "
            f"{row.cpu_s:.1f} | {row.rss_mib:.0f} | "
            f"{row.restart_seconds:.1f} |"
        )
    components = sorted({c for row in rows for c in row.component_cpu})
    print(
        "\nCPU seconds of each cluster component over each strategy's window (where its time "
        "went), and kube-scheduler's scheduling attempts (scheduled / unschedulable / error):\n"
    )
    print("| controller | strategy | " + " | ".join(components) + " | scheduling attempts |")
    print("|---|---|" + "---:|" * len(components) + "---|")
    for row in rows:
        cpu = " | ".join(f"{row.component_cpu.get(c, 0.0):.1f}" for c in components)
        tries = " / ".join(
            f"{row.attempts.get(k, 0.0):.0f}" for k in ("scheduled", "unschedulable", "error")
        )
        print(f"| {row.controller} | {row.name} | {cpu} | {tries} |")
    by = {(r.controller, r.name): r for r in rows}
    print()
    for mode in ("reject", "gate", "narrow"):
        mine, fallback, theirs = (
            by.get((OURS, mode)),
            by.get((OURS, "affinity")),
            by.get((UPSTREAM, "reject")),
        )
        if mine and fallback:
            print(f"ours {mode} / ours affinity, pods/s: "
                  f"{mine.pods_per_second / fallback.pods_per_second:.2f}x")  # fmt: skip
        if mine and theirs:
            print(
                f"ours {mode} / upstream reject: pods/s "
                f"{mine.pods_per_second / theirs.pods_per_second:.2f}x, API requests "
                f"{mine.requests / max(theirs.requests, 1):.2f}x"
            )
    creates = [r for r in rows if r.controller == UPSTREAM and r.name == "reject"]
    if creates:
        rate = creates[0].pods_per_second
        print(f"upstream reject: {rate:.1f} pods/s, the rate its pods reached admission "
              "(admission_bench.py --rate compares latency at it)")  # fmt: skip


class Profiled(Protocol):
    """A measured run with profiles: placement_bench's Row, recovery_bench's Run."""

    controller: str
    profiles: dict[str, Path]

    @property
    def name(self) -> str: ...


def print_profiles(rows: Sequence[Profiled], lines: int = 30) -> None:
    """The top of each profile by cumulative time, Kubernetes' own functions only (`go tool
    pprof -top -cum -show`): the runtime's and the HTTP/2 client's frames would fill the top."""
    for row in rows:
        for component, path in row.profiles.items():
            if not path.exists():
                continue
            top = subprocess.run(
                [
                    *("go", "tool", "pprof", "-top", "-cum", r"-show=^k8s\.io/"),
                    *(f"-nodecount={lines}", str(path)),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            print(f"\n{component}, {row.controller} {row.name} ({path}):")
            print(top.stdout if top.returncode == 0 else top.stderr)


if __name__ == "__main__":
    main()
