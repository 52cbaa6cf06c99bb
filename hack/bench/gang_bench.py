"""Benchmark: one JobSet's pods placed with and without gang scheduling (KEP-969, issue 26).

Why: gang scheduling changes when the scheduler may place a pod (only once its whole group
exists, then the group in one cycle), so it can be faster (one placement for many pods) or
slower (nothing binds until the last pod exists). This measures which, on the full local cluster.

One full cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) of
Kubernetes >= 1.37 with the Workload API on (`FullCluster(workload_api=True)`: the
GenericWorkload gate on every component, which also turns on kube-scheduler's GangScheduling
plugin and its pod-group scheduling cycle, and scheduling.k8s.io/v1beta1 served), NODES kwok
nodes (32 racks of 8 by default), and one `jobset-controller run` with the
JobSetWorkloadAwareSchedulingAPI gate on for the whole run. No admission webhook is registered:
the measured path is controller -> Job controller -> scheduler, and the controller reads
`spec.scheduling` with its own defaults (the webhook would add one review per JobSet create and
nothing else here).

The JobSet: REPLICATED_JOBS ReplicatedJobs sharing JOBS Jobs of PODS pods (8 x 4 x 8 = 32 Jobs,
256 pods by default), the same shape in every mode; every pod asks for GPUS_PER_POD of the node's
4 GPUs (default 4: one pod per node, the whole cluster, as a training job takes it) and stays
Running (kwok's run-forever stage), so nothing ends during the measurement. Modes:

- none: no `spec.scheduling`: pod by pod, as before;
- gang: `spec.scheduling: {}`: one JobSet-wide gang (one PodGroup, minCount = every pod);
- rjob-gangs: one gang per ReplicatedJob (REPLICATED_JOBS PodGroups; at most 8, the API's limit);
- basic: `schedulingPolicy: {basic: {}}`: one PodGroup without the gang rule, the cost of the
  pod-group machinery alone.

Each mode runs once per round, the order reversed every other round (the machine's load drifts);
between runs the JobSet is deleted and the bench waits until its pods, Jobs, Workload and
PodGroups are gone and the API server is quiet again. Measured per run:

- create -> all bound: seconds from the JobSet POST to every pod having `spec.nodeName` (the
  bench's own watch of the pods: millisecond times, where a PodScheduled condition has seconds);
- pods created: from the POST to the last pod's ADDED event (controller + Job controller: the
  same work in every mode, not the same time: pods bound meanwhile set kwok and the scheduler
  competing with them for the two cores); tail: from that moment to the last bind (what the
  scheduler adds once it has every pod);
- bind rate: pods / seconds from the first bind to the last, as the watch saw them. Without gangs
  the scheduler binds pods as they arrive, so this is the arrival rate (the scheduler keeps up);
  with a gang it is the burst after the group's one cycle: not the same quantity, compared only
  because the issue asked for the scheduler's pods/s;
- scheduler CPU: user+sys seconds of kube-scheduler from the POST to the last bind (/proc), and
  pods per scheduler CPU-second: the scheduler's cost, which a busy machine distorts far less
  than wall-clock figures;
- from kube-scheduler's /metrics (deltas over the run): `scheduler_schedule_attempts_total` by
  result (scheduled / unschedulable / error), `scheduler_podgroup_schedule_attempts_total`, and the
  algorithm's milliseconds per pod (`scheduler_scheduling_algorithm_duration_seconds`, which a
  pod-group cycle also records for each pod it places), and the pod-group cycles' seconds
  (`scheduler_podgroup_scheduling_attempt_duration_seconds`, summed: from the group's pop to its
  binds handed to the binding goroutines).

Printed: a row per run, the medians per mode and their ratio to `none`, and the 1-minute load
average at each run (the machine is shared: the wall-clock figures follow it). Each run's pod
timeline (seconds from the POST to each pod's ADDED event and to its bind) is kept in the work
directory as timeline-<mode>-<round>.json.

Run: JOBSET_K8S_BIN=~/.cache/jobset-controller/k8s-v1.37.2/bin .venv/bin/python
     hack/bench/gang_bench.py [--rounds 3] [--modes none gang rjob-gangs basic] [--gpus-per-pod 4]

`--contention` measures instead what gangs are for: gang_contention.py's docstring says how
(`--jobsets 2 --jobset-pods 160 --work 10 --stall 60`), with this file's cluster and flags.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import orjson
from benchlib import (
    RawClient,
    Watcher,
)
from gang_contention import contention_options, contention_run, print_contention
from ganglib import (
    GATE,
    JOBSET_NAME_LABEL,
    JOBSETS,
    NAMESPACE,
    SCHEDULING,
    Scheduler,
    counts,
    delete_and_wait,
    manifest,
    quiet,
)
from rounds import side_order

from jobset_controller_dev.envtest.controller import ControllerProcess, start_local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.nodes import rack_topology

MODES = ("none", "gang", "rjob-gangs", "basic")


@dataclass
class Run:
    """One mode's measurement in one round (seconds from the JobSet POST unless said)."""

    mode: str
    round: int
    load: float
    pods: int
    all_bound: float = 0.0
    created: float = 0.0
    first_bound: float = 0.0
    scheduler_cpu: float = 0.0
    attempts: dict[str, float] = field(default_factory=dict)
    group_attempts: dict[str, float] = field(default_factory=dict)
    algorithm: float = 0.0  # the pods' scheduling algorithm seconds (filter, score)
    group_cycles: float = 0.0  # pod-group scheduling cycles, seconds summed

    @property
    def tail(self) -> float:
        return self.all_bound - self.created

    @property
    def bind_rate(self) -> float:
        return self.pods / max(self.all_bound - self.first_bound, 1e-3)

    @property
    def pods_per_cpu(self) -> float:
        return self.pods / max(self.scheduler_cpu, 1e-3)

    @property
    def algorithm_ms_per_pod(self) -> float:
        return 1000 * self.algorithm / self.pods


async def measure(
    cluster: FullCluster,
    client: RawClient,
    scheduler: Scheduler,
    mode: str,
    round_: int,
    args: argparse.Namespace,
) -> Run:
    """Create the JobSet of `mode`, time every pod's arrival and bind, check the Workload and
    PodGroups the mode should have produced, then delete it all and wait until the cluster is
    clean and quiet."""
    name = f"{mode}-{round_}"
    total = args.jobs * args.pods
    run = Run(mode, round_, os.getloadavg()[0], total)
    seen: dict[str, float] = {}
    bound: dict[str, float] = {}

    def on_event(kind: str, old: dict[str, Any] | None, pod: dict[str, Any]) -> None:
        now = time.perf_counter()
        pod_name = pod["metadata"]["name"]
        seen.setdefault(pod_name, now)
        if pod["spec"].get("nodeName"):
            bound.setdefault(pod_name, now)

    selector = quote(f"{JOBSET_NAME_LABEL}={name}")
    pods = Watcher(
        client,
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        params=f"labelSelector={selector}",
        on_event=on_event,
    )
    await pods.start()
    body = manifest(name, mode, args.replicated_jobs, args.jobs, args.pods, args.gpus_per_pod)
    before = await scheduler.counters()
    cpu_before = scheduler.cpu()
    began = time.perf_counter()
    try:
        status, reply = await client.request("POST", JOBSETS, body)
        assert status == 201, reply
        await pods.wait(lambda: len(bound) >= total, limit=args.timeout)
        cpu_after = scheduler.cpu()
    finally:
        await pods.stop()
    run.all_bound = max(bound.values()) - began
    run.first_bound = min(bound.values()) - began
    run.created = max(seen.values()) - began
    run.scheduler_cpu = cpu_after - cpu_before
    await asyncio.sleep(1)  # the binding goroutines record their metrics after the bind
    after = await scheduler.counters()
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    run.attempts = {k[4:]: v for k, v in delta.items() if k.startswith("pod:") and v}
    run.group_attempts = {k[6:]: v for k, v in delta.items() if k.startswith("group:") and v}
    run.algorithm = delta.get("algorithm", 0.0)
    run.group_cycles = delta.get("group cycles", 0.0)
    await check_links(client, name, mode, args.replicated_jobs)
    timeline = {pod: (seen[pod] - began, bound.get(pod, 0.0) - began) for pod in seen}
    (args.workdir / f"timeline-{name}.json").write_bytes(orjson.dumps(timeline))
    print(
        f"  round {round_} {mode}: all bound {run.all_bound:.2f} s (created {run.created:.2f} s, "
        f"first bound {run.first_bound:.2f} s, tail {run.tail:.2f} s), "
        f"scheduler CPU {run.scheduler_cpu:.2f} s, "
        f"attempts {run.attempts} groups {run.group_attempts}, load {run.load:.1f}",
        file=sys.stderr,
        flush=True,
    )
    await delete_and_wait(cluster, client, name)
    return run


async def check_links(client: RawClient, name: str, mode: str, rjobs: int) -> None:
    """The Workload and PodGroups the controller made for `mode`, and every pod linked to one
    of them: a gang run that silently fell back to pod-by-pod scheduling would measure nothing."""
    expected = {"none": 0, "gang": 1, "basic": 1, "rjob-gangs": rjobs}[mode]
    _, workloads = await client.request("GET", f"{SCHEDULING}/workloads")
    _, groups = await client.request("GET", f"{SCHEDULING}/podgroups")
    mine = [
        group
        for group in groups.get("items") or ()
        if any(o.get("name") == name for o in group["metadata"].get("ownerReferences") or ())
    ]
    owned_workloads = [
        w
        for w in workloads.get("items") or ()
        if any(o.get("name") == name for o in w["metadata"].get("ownerReferences") or ())
    ]
    assert len(mine) == expected, f"{name}: {len(mine)} PodGroups, expected {expected}"
    assert len(owned_workloads) == (1 if expected else 0), f"{name}: {owned_workloads}"
    names = {group["metadata"]["name"] for group in mine}
    _, pods = await client.request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={JOBSET_NAME_LABEL}%3D{name}"
    )
    links = {
        (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
        for pod in pods.get("items") or ()
    }
    assert links == (names or {None}), f"{name}: pods link to {links}, PodGroups {names}"


T = TypeVar("T")
RunOne = Callable[[FullCluster, RawClient, Scheduler, str, int, argparse.Namespace], Awaitable[T]]


async def in_rounds(
    cluster: FullCluster, args: argparse.Namespace, modes: list[str], run_one: RunOne[T]
) -> list[T]:
    """Every round's runs, one after the other, in one namespace on one cluster and controller
    (a fresh cluster per mode would spend its 10-20 s start on each and change nothing). The
    modes' order is reversed every other round, so neither always runs on the warmer cluster."""
    client = RawClient(cluster)
    try:
        await client.ensure_namespace(NAMESPACE)
        cluster.wait_for_service_account(NAMESPACE)
        scheduler = Scheduler(cluster, client)
        await quiet(cluster)
        results: list[T] = []
        for round_ in range(1, args.rounds + 1):
            for mode in side_order(modes, round_ - 1):  # round_ counts from 1
                results.append(await run_one(cluster, client, scheduler, mode, round_, args))
        return results
    finally:
        await client.close()


def print_tables(runs: list[Run], args: argparse.Namespace, nodes: int) -> None:
    print(
        f"\n{args.jobs} Jobs x {args.pods} pods = {args.jobs * args.pods} pods in "
        f"{args.replicated_jobs} ReplicatedJobs, {nodes} kwok nodes, {args.gpus_per_pod} of 4 "
        f"GPUs per pod; {os.cpu_count()} cores\n"
    )
    print(
        "| round | mode | load | create -> all bound (s) | pods created (s) | tail (s) | "
        "bind rate (pods/s) | scheduler CPU (s) | pods / scheduler CPU-s | algorithm ms/pod | "
        "group cycles (s) | pod attempts | group attempts |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for run in runs:
        print(
            f"| {run.round} | {run.mode} | {run.load:.1f} | {run.all_bound:.2f} | "
            f"{run.created:.2f} | {run.tail:.2f} | {run.bind_rate:.0f} | "
            f"{run.scheduler_cpu:.2f} | {run.pods_per_cpu:.0f} | "
            f"{run.algorithm_ms_per_pod:.2f} | {run.group_cycles:.2f} | {counts(run.attempts)} | "
            f"{counts(run.group_attempts)} |"
        )
    figures: list[tuple[str, Callable[[Run], float], str]] = [
        ("create -> all bound (s)", lambda r: r.all_bound, ".2f"),
        ("pods created (s)", lambda r: r.created, ".2f"),
        ("first bind (s)", lambda r: r.first_bound, ".2f"),
        ("tail: last pod created -> all bound (s)", lambda r: r.tail, ".2f"),
        ("bind rate, first -> last bind (pods/s)", lambda r: r.bind_rate, ".0f"),
        ("scheduler CPU (s)", lambda r: r.scheduler_cpu, ".2f"),
        ("pods per scheduler CPU-second", lambda r: r.pods_per_cpu, ".0f"),
        ("scheduler algorithm (ms per pod)", lambda r: r.algorithm_ms_per_pod, ".2f"),
        ("pod-group cycles (s, summed)", lambda r: r.group_cycles, ".2f"),
    ]
    modes = list(args.modes)
    others = [m for m in modes if m != "none"]
    print(f"\nmedians of {args.rounds} rounds; ratio = mode / none\n")
    header = " | ".join(modes + [f"{m} / none" for m in others if "none" in modes])
    print(f"| figure | {header} |")
    print("|---|" + "---:|" * (len(modes) + (len(others) if "none" in modes else 0)))
    for label, value, spec in figures:
        medians = {m: statistics.median(value(r) for r in runs if r.mode == m) for m in modes}
        cells = [format(medians[m], spec) for m in modes]
        if "none" in modes:
            base = medians["none"]
            cells += [f"{medians[m] / base:.2f}x" if base else "-" for m in others]
        print(f"| {label} | {' | '.join(cells)} |")
    loads = [r.load for r in runs]
    print(f"\nload average (1 min) at the runs: {min(loads):.1f} - {max(loads):.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--racks", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=8, help="nodes per rack")
    parser.add_argument("--replicated-jobs", type=int, default=8, help="at most 8 (rjob-gangs)")
    parser.add_argument("--jobs", type=int, default=32, help="Jobs in all")
    parser.add_argument("--pods", type=int, default=8, help="pods per Job")
    parser.add_argument("--gpus-per-pod", type=int, default=4, help="of 4 per node; 0: none")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument(
        "--contention",
        action="store_true",
        help="instead: JobSets that each fit alone but not together, with and without gangs "
        "(gang_contention.py)",
    )
    contention_options(parser)
    args = parser.parse_args()
    if args.jobs % args.replicated_jobs:
        parser.error("--jobs must be a multiple of --replicated-jobs")
    workdir = args.workdir = Path(tempfile.mkdtemp(prefix="gang-bench-"))
    nodes = rack_topology(racks=args.racks, nodes_per_rack=args.nodes, zones=4)
    began = time.monotonic()
    cluster = FullCluster(
        nodes=nodes,
        workdir=workdir / "cluster",
        workload_api=True,
    ).start()
    print(
        f"cluster with {len(nodes)} kwok nodes up in {time.monotonic() - began:.1f} s "
        f"(workdir {workdir})",
        file=sys.stderr,
    )
    controller: ControllerProcess | None = None
    try:
        controller = start_local_controller(
            workdir=workdir,
            ca=cluster.ca,
            kubeconfig=cluster.kubeconfig,
            stem="gang-bench",
            sections={"featureGates": {GATE: True}},
        )
        if args.contention:
            outcomes = asyncio.run(
                in_rounds(cluster, args, list(args.contention_modes), contention_run)
            )
        else:
            runs = asyncio.run(in_rounds(cluster, args, list(args.modes), measure))
    finally:
        if controller is not None:
            controller.stop(60)
        cluster.stop()
    if args.contention:
        print_contention(outcomes, args, len(nodes))
    else:
        print_tables(runs, args, len(nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
