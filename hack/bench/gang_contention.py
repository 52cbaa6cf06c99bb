"""Benchmark: JobSets that each fit alone but not together, with and without gangs (KEP-969).

Why: gang_bench.py's default run places one JobSet on an empty cluster with room for every pod,
where a gang can only add its wait. What gangs are for is contention: when the cluster cannot
hold every pod, pod-by-pod scheduling gives each JobSet part of the nodes, and a workload whose
workers need all their peers before they work (a collective's rendezvous: every rank joins, then
the job starts) then holds those nodes idle, for good if nothing else ends. A gang is placed
whole or not at all. This measures both on Kubernetes 1.37.2's own scheduler.

`gang_bench.py --contention` runs it on gang_bench's cluster (NODES kwok nodes, 32 racks of 8 by
default; every pod takes a whole node with `--gpus-per-pod 4`) and our controller with the
JobSetWorkloadAwareSchedulingAPI gate on. `--jobsets` JobSets of `--jobset-pods` pods (Jobs of
`--pods` pods, one ReplicatedJob), 2 x 160 on 256 nodes by default, are POSTed at once, in each
mode:

- none: no `spec.scheduling`, pod by pod;
- gang: `spec.scheduling: {}`, one JobSet-wide gang (minCount = every pod).

The workload (the rendezvous, played by the bench): pods run until released; the bench watches
every pod and, once all pods of a JobSet are Running, takes their run-forever annotation off and
gives them `--work` seconds of run (kwok then ends each Succeeded); the JobSet completes when
its Jobs do. A JobSet with part of its pods placed stays waiting, holding its nodes.

Measured per run, seconds from the POSTs: each JobSet's release (all its pods Running) and
completion (its Completed condition, from a watch of the JobSets); the first and the last
completion. The end: every JobSet completed, or no progress (no pod bound, started or ended)
for `--stall` seconds with some not completed: a deadlock, reported with where each JobSet's
pods stood. Also: pods held by partly placed JobSets (bound, not ended, their JobSet not all
placed), as node-seconds over the run and as the largest number held by JobSets that stayed
partly placed longer than BINDING_IN_FLIGHT seconds (a gang's own binding calls, one per pod
after its one cycle, pass through partial counts for about a second); kube-scheduler's CPU
seconds over the run (/proc) and its scheduling attempts by result (/metrics). Each run's
samples (every 0.5 s, each JobSet's bound and running pods) are kept in the work directory as
contention-<mode>-<round>.json. Between runs everything is deleted and the cluster left to
quiet down, as in gang_bench.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from benchlib import RawClient, Watcher
from ganglib import (
    JOBSETS,
    NAMESPACE,
    Scheduler,
    counts,
    delete_and_wait,
    manifest,
)

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import (
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)

CONTENTION_MODES = ("none", "gang")
JOBSET_NAME_LABEL = JOBSET_NAME_KEY
# A partial placement shorter than this is a gang's binding calls in flight, not a hold.
BINDING_IN_FLIGHT = 5.0
SAMPLE_EVERY = 0.5
ENDED = ("Succeeded", "Failed")


def contention_options(parser: argparse.ArgumentParser) -> None:
    """The flags of `gang_bench.py --contention` (its own flags give the cluster's shape)."""
    group = parser.add_argument_group("--contention")
    group.add_argument("--jobsets", type=int, default=2, help="JobSets POSTed at once")
    group.add_argument("--jobset-pods", type=int, default=160, help="pods per JobSet")
    group.add_argument("--work", type=float, default=10.0, help="seconds each pod runs once "
                       "its whole JobSet is Running")  # fmt: skip
    group.add_argument("--stall", type=float, default=60.0, help="seconds without progress "
                       "that count as a deadlock")  # fmt: skip
    group.add_argument(
        "--contention-modes", nargs="+", default=list(CONTENTION_MODES), choices=CONTENTION_MODES
    )


@dataclass
class Member:
    """One JobSet of a contention run, as the bench's watches see it."""

    name: str
    total: int
    pods: dict[str, tuple[bool, str]] = field(default_factory=dict)  # pod -> (bound, phase)
    released: float | None = None
    completed: float | None = None
    failed: float | None = None
    partial_since: float | None = None

    def bound(self) -> int:
        """Pods holding a node: bound and not ended."""
        return sum(1 for node, phase in self.pods.values() if node and phase not in ENDED)

    def running(self) -> int:
        return sum(1 for _, phase in self.pods.values() if phase == "Running")

    def partial(self) -> bool:
        """Part of its pods placed, waiting for the rest (never once released)."""
        return self.released is None and 0 < self.bound() < self.total


@dataclass
class Outcome:
    """One mode's run in one round (seconds from the POSTs)."""

    mode: str
    round: int
    load: float
    members: list[Member]
    end: float = 0.0
    deadlock: bool = False
    held_node_seconds: float = 0.0
    peak_held: int = 0
    scheduler_cpu: float = 0.0
    attempts: dict[str, float] = field(default_factory=dict)
    group_attempts: dict[str, float] = field(default_factory=dict)
    load_end: float = 0.0

    @property
    def completions(self) -> list[float]:
        return sorted(m.completed for m in self.members if m.completed is not None)

    @property
    def first(self) -> float | None:
        return self.completions[0] if self.completions else None

    @property
    def last(self) -> float | None:
        done = self.completions
        return done[-1] if len(done) == len(self.members) else None


class Tracker:
    """Every pod's (bound, phase) per JobSet from one watch; the node-seconds held by partly
    placed JobSets, integrated at each event (the count only changes at events)."""

    def __init__(self, members: list[Member], began: float) -> None:
        self.by_name = {m.name: m for m in members}
        self.began = began
        self.progress = began  # the last time a pod was bound, started or ended
        self.held_node_seconds = 0.0
        self._held = 0
        self._at = began

    def on_event(self, kind: str, old: dict[str, Any] | None, pod: dict[str, Any]) -> None:
        now = time.perf_counter()
        member = self.by_name.get((pod["metadata"].get("labels") or {}).get(JOBSET_NAME_LABEL, ""))
        if member is None:
            return
        self.held_node_seconds += self._held * (now - self._at)
        self._at = now
        name = pod["metadata"]["name"]
        state = (bool(pod["spec"].get("nodeName")), (pod.get("status") or {}).get("phase", ""))
        if kind == "DELETED":
            member.pods.pop(name, None)
        elif member.pods.get(name) != state:
            member.pods[name] = state
            self.progress = now
        for each in self.by_name.values():
            if each.partial():
                each.partial_since = each.partial_since or now
            else:
                each.partial_since = None
        self._held = sum(m.bound() for m in self.by_name.values() if m.partial())

    def restart(self) -> float:
        """Count from now (the POSTs); returns the moment."""
        self.began = self.progress = self._at = time.perf_counter()
        return self.began

    def held_long(self, now: float) -> int:
        """Pods held by JobSets partly placed for longer than a gang's binding takes."""
        return sum(
            m.bound()
            for m in self.by_name.values()
            if m.partial_since is not None and now - m.partial_since > BINDING_IN_FLIGHT
        )

    def close(self, now: float) -> None:
        self.held_node_seconds += self._held * (now - self._at)
        self._at = now


async def release(client: RawClient, member: Member, work: float) -> None:
    """The rendezvous: every pod of the JobSet is Running, so they start work (`work` s)."""
    patch = orjson.dumps(
        {
            "metadata": {
                "annotations": {RUN_FOREVER_ANNOTATION: None, RUN_DURATION_ANNOTATION: f"{work}s"}
            }
        }
    )
    bodies = [(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}", patch) for pod in member.pods]
    codes = await client.many(
        "PATCH", bodies, in_flight=20, content_type="application/merge-patch+json"
    )
    assert set(codes) == {200}, f"{member.name}: release answered {codes}"


async def contention_run(
    cluster: FullCluster,
    client: RawClient,
    scheduler: Scheduler,
    mode: str,
    round_: int,
    args: argparse.Namespace,
) -> Outcome:
    names = [f"{mode}-{round_}-{index}" for index in range(args.jobsets)]
    members = [Member(name, args.jobset_pods) for name in names]
    outcome = Outcome(mode, round_, os.getloadavg()[0], members)
    tracker = Tracker(members, time.perf_counter())
    began = tracker.began

    def on_jobset(kind: str, old: dict[str, Any] | None, jobset: dict[str, Any]) -> None:
        member = tracker.by_name.get(jobset["metadata"]["name"])
        if member is None:
            return
        for entry in (jobset.get("status") or {}).get("conditions") or ():
            if entry.get("status") != "True":
                continue
            if entry.get("type") == "Completed" and member.completed is None:
                member.completed = time.perf_counter() - began
            if entry.get("type") == "Failed" and member.failed is None:
                member.failed = time.perf_counter() - began

    pods = Watcher(client, f"/api/v1/namespaces/{NAMESPACE}/pods", on_event=tracker.on_event)
    jobsets = Watcher(client, JOBSETS, on_event=on_jobset)
    await pods.start()
    await jobsets.start()
    jobs = args.jobset_pods // args.pods
    bodies = [manifest(name, mode, 1, jobs, args.pods, args.gpus_per_pod) for name in names]
    before = await scheduler.counters()
    cpu_before = scheduler.cpu()
    samples: list[dict[str, Any]] = []
    releases: set[asyncio.Task[None]] = set()
    began = tracker.restart()
    try:
        replies = await asyncio.gather(*(client.request("POST", JOBSETS, body) for body in bodies))
        assert all(status == 201 for status, _ in replies), replies
        next_sample = began
        while True:
            now = time.perf_counter()
            for member in members:
                if member.released is None and member.running() == member.total:
                    member.released = now - began
                    task = asyncio.create_task(release(client, member, args.work))
                    releases.add(task)
            outcome.peak_held = max(outcome.peak_held, tracker.held_long(now))
            if now >= next_sample:
                next_sample += SAMPLE_EVERY
                samples.append(
                    {
                        "t": round(now - began, 2),
                        **{m.name: [m.bound(), m.running()] for m in members},
                    }
                )
            if all(m.completed is not None or m.failed is not None for m in members):
                break
            if now - tracker.progress > args.stall:
                outcome.deadlock = True
                break
            if now - began > args.timeout:
                raise TimeoutError(f"{mode}: not over within {args.timeout:g} s")
            await asyncio.sleep(0.05)
        end = time.perf_counter()
        outcome.scheduler_cpu = scheduler.cpu() - cpu_before
        await asyncio.gather(*releases)
    finally:
        await pods.stop()
        await jobsets.stop()
    tracker.close(end)
    outcome.end = end - began
    outcome.held_node_seconds = tracker.held_node_seconds
    outcome.load_end = os.getloadavg()[0]
    after = await scheduler.counters()
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    outcome.attempts = {k[4:]: v for k, v in delta.items() if k.startswith("pod:") and v}
    outcome.group_attempts = {k[6:]: v for k, v in delta.items() if k.startswith("group:") and v}
    (args.workdir / f"contention-{mode}-{round_}.json").write_bytes(orjson.dumps(samples))
    print(f"  round {round_} {mode}: {describe(outcome)}", file=sys.stderr, flush=True)
    for name in names[:-1]:
        status, reply = await client.request(
            "DELETE",
            f"{JOBSETS}/{name}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        assert status in (200, 202), reply
    await delete_and_wait(cluster, client, names[-1])
    return outcome


def describe(outcome: Outcome) -> str:
    parts = []
    for member in outcome.members:
        if member.completed is not None:
            parts.append(
                f"{member.name} ran at {member.released:.1f} s, done {member.completed:.1f} s"
            )
        elif member.failed is not None:
            parts.append(f"{member.name} Failed at {member.failed:.1f} s")
        else:
            parts.append(f"{member.name} {member.bound()}/{member.total} bound, never ran")
    end = "deadlock (no progress for the stall bound)" if outcome.deadlock else "over"
    return (
        f"{'; '.join(parts)}; {end} at {outcome.end:.1f} s; "
        f"held {outcome.held_node_seconds:.0f} node-s, "
        f"peak held {outcome.peak_held}; scheduler CPU {outcome.scheduler_cpu:.2f} s; "
        f"attempts {counts(outcome.attempts)} groups {counts(outcome.group_attempts)}; "
        f"load {outcome.load:.1f}-{outcome.load_end:.1f}"
    )


def seconds(value: float | None, outcome: Outcome) -> str:
    if value is not None:
        return f"{value:.1f}"
    return f"never (deadlock at {outcome.end:.0f} s)" if outcome.deadlock else "never"


def print_contention(outcomes: list[Outcome], args: argparse.Namespace, nodes: int) -> None:
    print(
        f"\n{args.jobsets} JobSets x {args.jobset_pods} pods (Jobs of {args.pods}) POSTed at "
        f"once on {nodes} kwok nodes, {args.gpus_per_pod} of 4 GPUs per pod; work "
        f"{args.work:g} s once a JobSet's pods all run; deadlock = no progress for "
        f"{args.stall:g} s; {os.cpu_count()} cores\n"
    )
    print(
        "| round | mode | load | first JobSet completed (s) | last JobSet completed (s) | "
        "each JobSet: all Running / completed (s) | pods held partly placed: node-s / peak | "
        "scheduler CPU (s) | pod attempts | group attempts |"
    )
    print("|---|---|---|---:|---:|---|---:|---:|---|---|")
    for o in outcomes:
        each = ", ".join(
            f"{m.released:.1f}/{m.completed:.1f}"
            if m.completed is not None and m.released is not None
            else f"{m.bound()} bound, not run"
            for m in o.members
        )
        print(
            f"| {o.round} | {o.mode} | {o.load:.1f}-{o.load_end:.1f} | {seconds(o.first, o)} | "
            f"{seconds(o.last, o)} | {each} | {o.held_node_seconds:.0f} / {o.peak_held} | "
            f"{o.scheduler_cpu:.2f} | {counts(o.attempts)} | {counts(o.group_attempts)} |"
        )
    modes = list(args.contention_modes)
    ratio = modes == ["none", "gang"] or modes == ["gang", "none"]
    print(
        f"\nper mode, medians of {args.rounds} round(s) (each run listed where they differ)"
        + ("; gang / none of the medians where both are measured" if ratio else "")
        + "\n"
    )
    print("| figure | " + " | ".join(modes) + (" | gang / none |" if ratio else " |"))
    print("|---|" + "---:|" * (len(modes) + ratio))
    rows: list[tuple[str, Callable[[list[Outcome]], tuple[str, float | None]]]] = [
        ("runs ending in a deadlock", deadlocks),
        ("first JobSet completed (s)", lambda os_: median_or_never(os_, "first")),
        ("last JobSet completed (s)", lambda os_: median_or_never(os_, "last")),
        (
            "node-seconds held by partly placed JobSets",
            lambda os_: median_of(os_, "held_node_seconds", "{:.0f}"),
        ),
        ("pods held partly placed, peak", lambda os_: median_of(os_, "peak_held", "{:.0f}")),
        (
            "kube-scheduler CPU over the run (s)",
            lambda os_: median_of(os_, "scheduler_cpu", "{:.2f}"),
        ),
        (
            "the run (s: to the last completion, or to the deadlock's call)",
            lambda os_: median_of(os_, "end", "{:.1f}"),
        ),
    ]
    for label, cell in rows:
        cells = {mode: cell([o for o in outcomes if o.mode == mode]) for mode in modes}
        line = f"| {label} | " + " | ".join(cells[mode][0] for mode in modes)
        if ratio:
            (_, gang), (_, none) = cells["gang"], cells["none"]
            if label.startswith("the run"):
                line += " | -"  # a deadlock's run ends at the bench's call, not the work's
            elif gang is not None and none:
                line += f" | {gang / none:.2f}x"
            elif gang is not None and none is None and "completed" in label:
                line += " | gang completes, none never"
            else:
                line += " | -"
        print(line + " |")
    loads = [o.load for o in outcomes] + [o.load_end for o in outcomes]
    print(f"\nload average (1 min) at the runs: {min(loads):.1f} - {max(loads):.1f}")


def deadlocks(outcomes: list[Outcome]) -> tuple[str, None]:
    return f"{sum(o.deadlock for o in outcomes)} of {len(outcomes)}", None


def median_of(outcomes: list[Outcome], attribute: str, spec: str) -> tuple[str, float]:
    value = statistics.median(getattr(o, attribute) for o in outcomes)
    return spec.format(value), value


def median_or_never(outcomes: list[Outcome], which: str) -> tuple[str, float | None]:
    """The median of `which` (a completion time), or why there is none; the number for a ratio
    only when every run measured it."""
    values = [getattr(o, which) for o in outcomes]
    if all(v is not None for v in values):
        median = statistics.median(values)
        return f"{median:.1f}", median
    if all(v is None for v in values):
        return "never" + (" (deadlock)" if all(o.deadlock for o in outcomes) else ""), None
    return ", ".join("never" if v is None else f"{v:.1f}" for v in values), None
