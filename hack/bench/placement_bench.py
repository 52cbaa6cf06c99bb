"""Benchmark: exclusive placement strategies on the full local cluster (numbers and ratios).

One full cluster (etcd, apiserver, controller-manager, scheduler, kwok) with RACKS x NODES kwok
nodes, one rack per topology domain. For each strategy, in its own namespace and with its own
`jobset-controller run`: one JobSet with one Job per rack and PODS pods per Job (pods run
forever). Measured:

- pods/s: pods / seconds from the JobSet create to every pod bound;
- API requests made by every client during that time (apiserver_request_total, our own polling
  subtracted), and pod creates refused (non-2xx POST pods: upstream's rejected followers);
- restart: a pod is deleted (its Job fails, backoffLimit 0), the JobSet restarts and recreates
  every Job; seconds until every pod of the new attempt is bound.

Strategies: none (no exclusive placement: the ceiling), affinity (affinity in every pod template:
the controller without pod webhooks), reject (leader/follower, upstream's rejected followers),
gate (leader/follower, followers wait behind a scheduling gate), node-selector (nodes labelled
per Job beforehand). Also printed: the memory of one cached pod, full and trimmed.

Run: JOBSET_K8S_BIN=... .venv/bin/python hack/bench/placement_bench.py [--racks 32 --pods 8]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobset_controller.controller.pods import trim_pod
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import RUN_FOREVER_ANNOTATION
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import NAMESPACED_JOB_LABEL, RACK_LABEL, rack_topology
from jobset_controller_dev.envtest.placement import PlacementController

EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR = "alpha.jobset.sigs.k8s.io/node-selector"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
_REQUESTS = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$", re.M)


@dataclass
class Row:
    name: str
    seconds: float = 0.0
    pods_per_second: float = 0.0
    requests: float = 0.0
    rejected_creates: float = 0.0
    restart_seconds: float = 0.0


class Counter:
    """apiserver_request_total (resource requests of every client), and our own polls."""

    def __init__(self, cluster: FullCluster) -> None:
        self.cluster = cluster
        self.polls = 0

    def read(self) -> tuple[float, float]:
        _, body = self.cluster.request("GET", "/metrics")
        total = rejected = 0.0
        for labels, value in _REQUESTS.findall(body.get("raw", "")):
            fields = dict(part.split("=", 1) for part in labels.split(","))
            fields = {k: v.strip('"') for k, v in fields.items()}
            if not fields.get("resource"):
                continue
            total += float(value)
            if (
                fields.get("resource") == "pods"
                and fields.get("verb") == "POST"
                and not fields.get("code", "").startswith("2")
            ):
                rejected += float(value)
        return total, rejected


def jobset(name: str, racks: int, pods: int, annotations: dict[str, str]) -> dict[str, Any]:
    workers = replicated_job(
        "w", racks, pods=pods, backoff_limit=0, annotations={RUN_FOREVER_ANNOTATION: "true"}
    )
    return jobset_manifest(
        name,
        replicated_jobs=[workers],
        annotations=annotations,
        failurePolicy={"maxRestarts": 1},
    )


def live_pods(cluster: FullCluster, counter: Counter, ns: str) -> list[dict[str, Any]]:
    counter.polls += 1
    return [
        p
        for p in cluster.list_items(f"/api/v1/namespaces/{ns}/pods")
        if not p["metadata"].get("deletionTimestamp")
    ]


def wait_bound(
    cluster: FullCluster, counter: Counter, ns: str, count: int, attempt: str, timeout: float
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        pods = [
            p
            for p in live_pods(cluster, counter, ns)
            if p["metadata"]["labels"].get(ATTEMPT) == attempt
        ]
        if len(pods) == count and all(p["spec"].get("nodeName") for p in pods):
            return pods
        if time.monotonic() > deadline:
            bound = sum(1 for p in pods if p["spec"].get("nodeName"))
            raise TimeoutError(f"{ns}: {bound}/{count} pods bound after {timeout} s")
        time.sleep(0.2)


def wait_no_jobset_pods(cluster: FullCluster) -> None:
    """The previous strategy's pods are gone (their anti-affinity spans namespaces)."""
    deadline = time.monotonic() + 180
    while cluster.list_items("/api/v1/pods", label_selector=JOBSET_NAME):
        if time.monotonic() > deadline:
            raise TimeoutError("pods of the previous strategy are still there")
        time.sleep(0.5)


def run_strategy(
    cluster: FullCluster,
    workdir: Path,
    name: str,
    followers: str | None,
    annotations: dict[str, str],
    racks: int,
    pods: int,
    prepare: Callable[[str], None] = lambda ns: None,
) -> tuple[Row, list[dict[str, Any]]]:
    wait_no_jobset_pods(cluster)
    ns = cluster.create_namespace(f"bench-{name}")
    prepare(ns)
    counter = Counter(cluster)
    total = racks * pods
    row = Row(name)
    strategy_dir = workdir / name
    strategy_dir.mkdir()
    with PlacementController(cluster, strategy_dir, followers):
        before, rejected_before = counter.read()
        began = time.monotonic()
        status, reply = cluster.request(
            "POST",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
            jobset("bench", racks, pods, annotations),
        )
        assert status == 201, reply
        placed = wait_bound(cluster, counter, ns, total, "0", timeout=600)
        row.seconds = time.monotonic() - began
        after, rejected_after = counter.read()
        row.pods_per_second = total / row.seconds
        row.requests = after - before - counter.polls - 2  # our polls and the two /metrics reads
        row.rejected_creates = rejected_after - rejected_before
        victim = placed[0]["metadata"]["name"]
        began = time.monotonic()
        cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{victim}")
        wait_bound(cluster, counter, ns, total, "1", timeout=600)
        row.restart_seconds = time.monotonic() - began
        cluster.delete_namespace(ns)
    print(
        f"  {name}: {row.seconds:.1f} s, restart {row.restart_seconds:.1f} s",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--racks", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=8, help="nodes per rack")
    parser.add_argument("--pods", type=int, default=8, help="pods per Job")
    parser.add_argument(
        "--only", nargs="*", default=["none", "affinity", "reject", "gate", "node-selector"]
    )
    args = parser.parse_args()
    racks, pods = args.racks, args.pods
    workdir = Path(tempfile.mkdtemp(prefix="placement-bench-"))
    began = time.monotonic()
    nodes = rack_topology(racks=racks, nodes_per_rack=args.nodes, zones=4, gpus=0)
    cluster = FullCluster(nodes=nodes, workdir=workdir / "cluster").start()
    print(
        f"cluster with {len(nodes)} kwok nodes in {racks} racks up in "
        f"{time.monotonic() - began:.1f} s",
        file=sys.stderr,
    )
    rows: list[Row] = []
    sample: list[dict[str, Any]] = []
    try:
        rack_nodes: dict[str, list[str]] = {}
        for spec in nodes:
            rack_nodes.setdefault(spec.labels[RACK_LABEL], []).append(spec.name)

        def label_per_job(ns: str) -> None:
            for index in range(racks):
                cluster.label_nodes(
                    rack_nodes[f"rack-{index}"], {NAMESPACED_JOB_LABEL: f"{ns}_bench-w-{index}"}
                )

        exclusive = {EXCLUSIVE: RACK_LABEL}
        plans: list[tuple[str, str | None, dict[str, str], Callable[[str], None]]] = [
            ("none", None, {}, lambda ns: None),
            ("affinity", None, exclusive, lambda ns: None),
            ("reject", "Reject", exclusive, lambda ns: None),
            ("gate", "Gate", exclusive, lambda ns: None),
            ("node-selector", None, {**exclusive, NODE_SELECTOR: "true"}, label_per_job),
        ]
        for name, followers, annotations, prepare in plans:
            if name not in args.only:
                continue
            row, placed = run_strategy(
                cluster, workdir, name, followers, annotations, racks, pods, prepare
            )
            rows.append(row)
            if name == "gate":
                sample = placed
    finally:
        cluster.stop()
    print_table(rows, racks, pods, len(nodes))
    if sample:
        full = sum(deep_size(p) for p in sample) / len(sample)
        trimmed = sum(deep_size(trim_pod(p)) for p in sample) / len(sample)
        print(
            f"\nmemory per cached pod (parsed JSON): full {full / 1024:.1f} KiB, "
            f"trimmed {trimmed / 1024:.1f} KiB ({trimmed / full:.0%})"
        )


def print_table(rows: list[Row], racks: int, pods: int, nodes: int) -> None:
    ceiling = next((r for r in rows if r.name == "none"), rows[0] if rows else None)
    print(
        f"\n{racks} Jobs x {pods} pods = {racks * pods} pods on {nodes} kwok nodes in "
        f"{racks} racks\n"
    )
    print(
        "| strategy | seconds | pods/s | x ceiling | API requests | x ceiling | rejected pod "
        "creates | restart: s to all bound | x ceiling |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        assert ceiling is not None
        print(
            f"| {row.name} | {row.seconds:.1f} | {row.pods_per_second:.1f} | "
            f"{row.pods_per_second / ceiling.pods_per_second:.2f} | {row.requests:.0f} | "
            f"{row.requests / max(ceiling.requests, 1):.2f} | {row.rejected_creates:.0f} | "
            f"{row.restart_seconds:.1f} | {row.restart_seconds / ceiling.restart_seconds:.2f} |"
        )


if __name__ == "__main__":
    main()
