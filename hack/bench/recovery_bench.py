"""Benchmark: recovery (issue 46), the time from one pod's failure to the JobSet's next attempt
running, per restart path, for our controller and upstream's v0.12.0 side by side.

The cluster is placement_bench's (benchlib.start_rack_cluster): RACKS x NODES kwok nodes, one rack
per topology domain; by default upstream's placement scale, 250 racks of 20 nodes (`--nodes-total
5000`). Every run, in its own namespace and with its own controller (the previous run's pods gone
first, as placement_bench waits), creates one JobSet of one Job per rack with PODS pods each (3750
at 5000 nodes), exclusive placement per rack by leader and followers (followers `Reject`, our
default; upstream's pod webhooks registered by URL, as placement_bench does), posted already
defaulted, failurePolicy maxRestarts 5, every Job backoffLimit 0, pods that run forever. Once
every pod is bound, Running and Ready, ONE pod of the first Job is failed (kwok's fail stage: exit
code 3 after 100 ms) and these instants are stamped with the bench's time.monotonic() as the API's
watch streams report them (a thread of the bench follows the namespace's JobSets, Jobs and pods:
no list of thousands of pods in a loop):

    t0  the failure injected (the pod's patch sent)
    t1  the controller acts: the JobSet's status.restarts raised (in place: its
        previous/currentInPlaceRestartAttempt changed)
    t2  the old children gone: no Job of the old restart-attempt label left
    t3  every Job of the new attempt created
    t4  every pod of the new attempt bound (spec.nodeName)
    t5  every pod of the new attempt Running and Ready

Printed per run: the phases t1-t0 (detect), t2-t1 (teardown), t3-t2 (create), t4-t3 (bind),
t5-t4 (run), failure to all bound (t4-t0) and to all Running (t5-t0); the controller's CPU seconds
from the JobSet's create to the end of the run and its RSS at the end; the 1-minute load average.

Paths (`--paths`, all by default, run in this order):

- recreate: Recreate as it comes (a deleted pod ends at once). Ours and upstream.
- recreate-grace: the same pods with terminationGracePeriodSeconds `--grace` (30) and kwok's
  honor-grace annotation (a deleted pod runs until its deletionTimestamp, as a container that only
  stops at SIGKILL). Ours and upstream.
- fast: recreate-grace with our Configuration's `earlyJobConditions: {enable: true}` (the restart
  on the failed Job's FailureTarget condition). Ours only.
- dead-node: recreate-grace, and before the failure the node of one pod of another Job is frozen
  (FullCluster.freeze_node: kwok no longer plays it or its pods; once the node lifecycle
  controller has tainted it node.kubernetes.io/unreachable, the pod is failed). Ours (by default
  `unreachableNodePods.forceDelete`: the pod stuck terminating is force-deleted past twice its
  grace period) reaches the next attempt; ours with `forceDelete: false` and upstream are
  expected to stay stuck: they are given `--stuck-window` seconds from the failure and reported
  "stuck after N s" with the old Jobs and pods left. The frozen node is then deleted and a fresh
  one takes its place in its rack, so later runs never meet it.
- in-place: `restartStrategy: InPlaceRestart` with the InPlaceRestart gate (ours and upstream's:
  v0.12.0 has the gate and the same agent protocol), the Jobs as restart_bench shapes them
  (backoffLimit MaxInt32, podReplacementPolicy Failed, completions == parallelism), every pod's
  agent run by the agent pool (envtest/agent_pool.py: all agents in one process, as
  restart_bench's kwok mode). One agent is failed as its worker's failure would; t5 is the
  moment the last agent lifted its barrier for the new attempt (the pool reports each lift);
  t2-t4 do not apply (pods are kept).

At the end: one Markdown table of every run (a run that failed says why and the others go on),
then the goals with the ratios of this one run: fast / ours recreate-grace, failure to all bound
(<= 0.7); dead-node: ours' failure to all Running against ours' recreate-grace plus the force
delete's wait past the grace period, and whether the runs without force delete were still stuck
after the window; in-place / ours recreate, failure to all Running (<= 0.1); ours / upstream,
recreate and recreate-grace, failure to all Running (<= 1.1).

Run: JOBSET_K8S_BIN=... .venv/bin/python hack/bench/recovery_bench.py [--nodes-total 5000]
     [--racks 4 --nodes 4 --pods 3] [--paths recreate recreate-grace fast dead-node in-place]
     [--stuck-window 600] [--grace 30] [--no-upstream]
     [--profile SECONDS]: kube-scheduler's and kube-controller-manager's CPU profiles over the
     first SECONDS after each failure, their top printed by `go tool pprof`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchlib import RawClient, Watcher, add_cluster_arguments, start_rack_cluster
from placement_bench import (
    ATTEMPT,
    EXCLUSIVE,
    OURS,
    UPSTREAM,
    Scraper,
    Subject,
    jobset,
    ours,
    print_profiles,
    resident_mib,
    upstream,
    wait_no_jobset_pods,
)
from restart_bench import PoolAgents

from jobset_controller.api.constants import IN_PLACE_RESTART_ATTEMPT_KEY
from jobset_controller_dev.envtest.fullcluster import FullCluster, condition_true
from jobset_controller_dev.envtest.in_place_restart_fixtures import IN_PLACE_RESTART_GATE, JOBSETS
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    HONOR_GRACE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.nodes import RACK_LABEL, NodeSpec
from jobset_controller_dev.envtest.processes import process_cpu
from jobset_controller_dev.envtest.upstream import ensure_upstream

PATHS = ("recreate", "recreate-grace", "fast", "dead-node", "in-place")
JOB_NAME = "batch.kubernetes.io/job-name"
UNREACHABLE = "node.kubernetes.io/unreachable"
MAX_INT32 = 2**31 - 1
NO_FORCE_DELETE = f"{OURS}, forceDelete false"
PHASES = (("t0", "t1"), ("t1", "t2"), ("t2", "t3"), ("t3", "t4"), ("t4", "t5"))
T = TypeVar("T")


@dataclass(frozen=True)
class Variant:
    """One controller on one path."""

    label: str  # the table's controller column
    upstream: bool = False
    sections: Mapping[str, Any] = field(default_factory=dict)  # more of the Configuration
    stuck: bool = False  # expected to stay stuck: given --stuck-window, "stuck" is no error


def variants(path: str, with_upstream: bool) -> list[Variant]:
    theirs = [Variant(UPSTREAM, upstream=True)] if with_upstream else []
    if path == "fast":
        return [Variant(OURS, sections={"earlyJobConditions": {"enable": True}})]
    if path == "dead-node":
        no_force = {"unreachableNodePods": {"forceDelete": False}}
        return [
            Variant(OURS),
            Variant(NO_FORCE_DELETE, sections=no_force, stuck=True),
            *(dataclasses.replace(v, stuck=True) for v in theirs),
        ]
    if path == "in-place":
        gate = dict(IN_PLACE_RESTART_GATE)
        return [
            Variant(OURS, sections=gate),
            *(dataclasses.replace(v, sections=gate) for v in theirs),
        ]
    return [Variant(OURS), *theirs]


def manifest(path: str, racks: int, pods: int, grace: int) -> dict[str, Any]:
    exclusive = {EXCLUSIVE: RACK_LABEL}
    if path == "in-place":
        return jobset(
            "bench", racks, pods, exclusive,
            failure_policy={"maxRestarts": 5, "restartStrategy": "InPlaceRestart"},
            backoff_limit=MAX_INT32, job={"podReplacementPolicy": "Failed"},
        )  # fmt: skip
    held = path != "recreate"
    return jobset(
        "bench", racks, pods, exclusive,
        failure_policy={"maxRestarts": 5},
        pod_annotations={HONOR_GRACE_ANNOTATION: "true"} if held else None,
        pod_spec={"terminationGracePeriodSeconds": grace} if held else None,
    )  # fmt: skip


@dataclass
class Run:
    """One path with one controller: its instants (time.monotonic()), figures and outcome."""

    path: str
    controller: str
    marks: dict[str, float] = field(default_factory=dict)
    cpu_s: float | None = None
    rss_mib: float | None = None
    load: float | None = None
    stuck: str = ""  # expected and reached: how it stood at the end of the window
    error: str = ""
    notes: list[str] = field(default_factory=list)
    profiles: dict[str, Path] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """print_profiles' name of the run."""
        return self.path

    def span(self, start: str, end: str) -> float | None:
        if start in self.marks and end in self.marks:
            return self.marks[end] - self.marks[start]
        return None

    def total(self, end: str) -> float | None:
        """t0 to `end`, only for a run that got there as it should."""
        return None if self.error or self.stuck else self.span("t0", end)


# ----------------------------------------------------------------------------- watching
class LoopThread:
    """An event loop in a thread of the bench's (the watches, the agent pool's pipes): the main
    thread stays synchronous, as the cluster's client is, and hands coroutines over."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="watches", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Timeline:
    """One namespace's JobSets, Jobs and pods followed by watches on the LoopThread. Each event is
    stamped with time.monotonic() as it arrives; counts by restart attempt are kept as events
    come (one pod's event costs the same at 3750 pods as at 10), and each instant of the module
    docstring is marked the first time its condition holds. The main thread reads `marks` and
    the counts; the watch thread writes them."""

    def __init__(self, loop: LoopThread, cluster: FullCluster, ns: str, jobs: int, pods: int):
        self.loop, self.cluster, self.ns = loop, cluster, ns
        self.want_jobs, self.want_pods = jobs, pods
        self.marks: dict[str, float] = {}
        self.status: dict[str, Any] = {}
        self.jobs: Counter[str] = Counter()  # attempt -> Jobs that exist
        self.pods: Counter[tuple[str, str]] = Counter()  # (attempt, live|bound|running) -> pods
        self.stranded: set[str] = set()  # pods frozen with a dead node, until they are gone
        self.armed = False  # instants are marked from the failure on
        # JobSet writes seen from the failure on: in place, each one reaches every pod's agent.
        self.jobset_writes = 0
        self.jobset: dict[str, Any] = {}  # as its last event carried it
        # In place: the pods whose agent has annotated them with the new attempt (1).
        self._annotated: set[str] = set()
        self._job_attempt: dict[str, str] = {}
        self._pod_state: dict[str, list[tuple[str, str]]] = {}
        self._client: RawClient | None = None
        self._watchers: list[Watcher] = []

    def start(self) -> None:
        self.loop.run(self._start())

    async def _start(self) -> None:
        self._client = RawClient(self.cluster)
        self._watchers = [
            Watcher(self._client, JOBSETS.format(namespace=self.ns), on_event=self._jobset),
            Watcher(self._client, f"/apis/batch/v1/namespaces/{self.ns}/jobs", on_event=self._job),
            Watcher(self._client, f"/api/v1/namespaces/{self.ns}/pods", on_event=self._pod),
        ]
        for watcher in self._watchers:
            await watcher.start()

    def stop(self) -> None:
        self.loop.run(self._stop())

    async def _stop(self) -> None:
        for watcher in self._watchers:
            await watcher.stop()
        if self._client is not None:
            await self._client.close()

    def pods_now(self) -> list[dict[str, Any]]:
        """The pods as the watch holds them (read on the watch thread)."""

        async def read() -> list[dict[str, Any]]:
            return list(self._watchers[2].objects.values())

        return self.loop.run(read())

    def wait(self, done: Callable[[], bool], limit: float) -> bool:
        """Until `done()` (polled in memory), or False once `limit` s have passed; a watch that
        ended raises."""
        deadline = time.monotonic() + limit
        while not done():
            for watcher in self._watchers:
                watcher.raise_if_ended()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def describe(self) -> str:
        jobs, pods = self.jobs, self.pods
        return (
            "; ".join(
                f"attempt {a}: {jobs[a]} Jobs, {pods[a, 'live']} pods ({pods[a, 'bound']} bound, "
                f"{pods[a, 'running']} Running)"
                for a in ("0", "1")
            )
            + f"; restarts {self.status.get('restarts', 0)}"
        )

    # -- the watch thread
    def _mark(self, key: str) -> None:
        if self.armed:
            self.marks.setdefault(key, time.monotonic())

    def _check(self) -> None:
        status = self.status
        in_place = status.get("previousInPlaceRestartAttempt") is not None
        if (status.get("currentInPlaceRestartAttempt") or 0) >= 1:
            in_place = True
            self._mark("current")
        if (status.get("restarts") or 0) >= 1 or in_place:
            self._mark("t1")
        if "t1" in self.marks and self.jobs["0"] == 0:
            self._mark("t2")
        if self.jobs["1"] >= self.want_jobs:
            self._mark("t3")
        if self.pods["1", "bound"] >= self.want_pods:
            self._mark("t4")
        if self.pods["1", "running"] >= self.want_pods:
            self._mark("t5")

    def _jobset(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        self.jobset = new
        self.status = dict(new.get("status") or {})
        if self.armed and kind == "MODIFIED":
            self.jobset_writes += 1
        self._check()

    def _job(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        meta = new["metadata"]
        before = self._job_attempt.pop(meta["name"], None)
        if before is not None:
            self.jobs[before] -= 1
        if kind != "DELETED":
            attempt = self._job_attempt[meta["name"]] = (meta.get("labels") or {}).get(ATTEMPT, "")
            self.jobs[attempt] += 1
        self._check()

    def _pod(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        meta, status = new["metadata"], new.get("status") or {}
        for key in self._pod_state.pop(meta["name"], ()):
            self.pods[key] -= 1
        if kind == "DELETED":
            if meta["name"] in self.stranded:
                self.stranded.discard(meta["name"])
                if not self.stranded:
                    self._mark("stranded gone")
        else:
            attempt = (meta.get("labels") or {}).get(ATTEMPT, "")
            keys: list[tuple[str, str]] = [(attempt, "live")]
            if not meta.get("deletionTimestamp"):
                if (new.get("spec") or {}).get("nodeName"):
                    keys.append((attempt, "bound"))
                if status.get("phase") == "Running" and condition_true(new, "Ready"):
                    keys.append((attempt, "running"))
            for key in keys:
                self.pods[key] += 1
            self._pod_state[meta["name"]] = keys
            if status.get("phase") == "Failed":
                self._mark("failed")
        annotations = meta.get("annotations") or {}
        if kind != "DELETED" and annotations.get(IN_PLACE_RESTART_ATTEMPT_KEY) == "1":
            self._annotated.add(meta["name"])
            if len(self._annotated) >= self.want_pods:
                self._mark("annotated")
        else:
            self._annotated.discard(meta["name"])
        self._check()


# ----------------------------------------------------------------------------- one run
class Bench:
    """The cluster, its node specs (a frozen node is replaced), and the runs' common parts."""

    def __init__(
        self,
        args: argparse.Namespace,
        cluster: FullCluster,
        nodes: list[NodeSpec],
        upstream_bin: Path | None,
        workdir: Path,
    ) -> None:
        self.args, self.cluster, self.workdir = args, cluster, workdir
        self.specs = {spec.name: spec for spec in nodes}
        self.upstream_bin = upstream_bin
        self.total: int = args.racks * args.pods
        self.limit = max(600.0, self.total / 2)  # placement_bench's, for what should not stick
        self.loop = LoopThread()
        self.replaced = 0
        self.frozen: str | None = None

    def close(self) -> None:
        self.loop.close()

    def start(self, variant: Variant, workdir: Path) -> AbstractContextManager[Subject]:
        if variant.upstream:
            assert self.upstream_bin is not None
            gates = variant.sections.get("featureGates")
            return upstream(self.cluster, workdir, True, self.upstream_bin, "", gates)
        return ours(self.cluster, workdir, "Reject", variant.sections)

    def run(self, path: str, variant: Variant) -> Run:
        run = Run(path, variant.label)
        slug = re.sub(r"[^a-z0-9]+", "-", f"{path}-{variant.label}".lower()).strip("-")
        began = time.monotonic()
        ns = ""
        timeline: Timeline | None = None
        try:
            wait_no_jobset_pods(self.cluster)
            ns = self.cluster.create_namespace(f"recovery-{slug}")
            run_dir = self.workdir / slug
            run_dir.mkdir()
            timeline = Timeline(self.loop, self.cluster, ns, self.args.racks, self.total)
            timeline.start()
            with self.start(variant, run_dir) as subject:
                self.measure(run, path, variant, subject, timeline, slug)
        except Exception as error:  # one run's failure is reported; the others go on
            run.error = (
                f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            )
            traceback.print_exc()
        finally:
            if timeline is not None:
                run.marks.update({k: v for k, v in timeline.marks.items() if k not in run.marks})
                timeline.stop()
            try:  # the run's figures are kept whatever the clean-up meets
                if ns:
                    self.teardown(ns)
                if self.frozen is not None:
                    self.replace_node(self.frozen)
            except Exception:
                traceback.print_exc()
        print(
            f"  {path} {variant.label}: {summary(run)} ({time.monotonic() - began:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        return run

    def measure(
        self,
        run: Run,
        path: str,
        variant: Variant,
        subject: Subject,
        timeline: Timeline,
        slug: str,
    ) -> None:
        cluster, ns, total = self.cluster, timeline.ns, self.total
        cpu = process_cpu(subject.pid)
        began = time.monotonic()
        body = manifest(path, self.args.racks, self.args.pods, self.args.grace)
        status, reply = cluster.request("POST", JOBSETS.format(namespace=ns), body)
        assert status == 201, reply
        pool = PoolAgents(cluster, ns) if path == "in-place" else None
        try:
            if pool is not None:
                self.loop.run(pool.start())

            def ready() -> bool:
                agents = pool is None or pool.lifted(0)[0] >= total
                return agents and timeline.pods["0", "running"] >= total

            if not timeline.wait(ready, self.limit):
                raise TimeoutError(f"not every pod Running: {timeline.describe()}")
            run.notes.append(f"up in {time.monotonic() - began:.1f} s")
            pods = timeline.pods_now()
            victim = min(job_pods(pods, "bench-w-0"))
            if path == "dead-node":
                self.freeze(run, timeline, pods)
            profiling = []
            if self.args.profile:
                stem = self.args.profile_dir / slug
                profiling = Scraper(cluster).profile_components(
                    self.args.profile, stem, run.profiles
                )
            timeline.armed = True
            run.marks["t0"] = time.monotonic()
            if pool is not None:
                self.loop.run(pool.fail(victim))
                done: Callable[[], bool] = lambda: pool.lifted(1)[0] >= total  # noqa: E731
            else:
                fail_pod(cluster, ns, victim)
                done = lambda: "t5" in timeline.marks  # noqa: E731
            window = self.args.stuck_window if variant.stuck else self.limit
            reached = timeline.wait(done, window - (time.monotonic() - run.marks["t0"]))
            run.marks.update(timeline.marks)
            size = len(json.dumps(timeline.jobset))
            run.notes.append(f"{timeline.jobset_writes} JobSet writes of {size} bytes")
            if pool is not None and reached:
                run.marks["t5"] = pool.lifted(1)[1]
            if not reached:
                state = (
                    f"stuck after {window:.0f} s: {timeline.jobs['0']} old Jobs and "
                    f"{timeline.pods['0', 'live']} old pods left; {timeline.jobs['1']} new Jobs, "
                    f"{timeline.pods['1', 'running']}/{total} new pods Running"
                )
                if variant.stuck:
                    run.stuck = state
                else:
                    run.error = state
            elif variant.stuck:
                run.notes.append("not stuck")
            run.cpu_s = process_cpu(subject.pid) - cpu
            run.rss_mib = resident_mib(subject.pid)
            run.load = os.getloadavg()[0]
            for thread in profiling:
                thread.join()
        finally:
            if pool is not None:
                run.notes.append(f"agents' CPU {pool.cpu():.1f} s")
                self.loop.run(pool.close())
        for key, what in (
            ("failed", "pod Failed"),
            ("annotated", "every pod annotated with the new attempt"),
            ("current", "currentInPlaceRestartAttempt"),
        ):
            if (after := run.span("t0", key)) is not None:
                run.notes.append(f"{what} +{after:.1f} s")
        if (after := run.span("t1", "stranded gone")) is not None:
            run.notes.append(f"stranded pods gone {after:.1f} s after t1")

    def freeze(self, run: Run, timeline: Timeline, pods: list[dict[str, Any]]) -> None:
        """Freeze the node of a pod of the second Job (another rack than the failed pod's) and
        wait for the node lifecycle controller's unreachable taint."""
        others = job_pods(pods, "bench-w-1")
        if not others:
            raise RuntimeError("dead-node needs two racks or more")
        node = others[min(others)]
        began = time.monotonic()
        self.frozen = node
        frozen = self.cluster.freeze_node(node)
        timeline.stranded = {n.split("/", 1)[1] for n in frozen if n.startswith(f"{timeline.ns}/")}
        self.cluster.wait_for(
            f"/api/v1/nodes/{node}",
            lambda n: UNREACHABLE in {t["key"] for t in n["spec"].get("taints") or ()},
            timeout=300,
            interval=0.5,
            what=f"{node} tainted {UNREACHABLE}",
        )
        run.notes.append(
            f"{node} frozen (pods on it: {len(timeline.stranded)}), tainted unreachable after "
            f"{time.monotonic() - began:.1f} s"
        )

    def replace_node(self, name: str) -> None:
        """Delete a frozen node; a fresh one, with its labels, takes its place in its rack."""
        self.frozen = None
        self.replaced += 1
        spec = self.specs.pop(name)
        fresh = dataclasses.replace(spec, name=f"{spec.name}-{self.replaced}")
        self.cluster.delete_nodes([name])
        self.cluster.add_nodes([fresh])
        self.specs[fresh.name] = fresh

    def teardown(self, ns: str) -> None:
        """Delete the namespace, and its pods at once (a held pod would run out its grace).

        The pods' delete is sent from a thread: a collection of thousands of pods takes the API
        server longer than one request's timeout, and the next run waits for the pods to be gone
        anyway (`wait_no_jobset_pods`)."""
        self.cluster.delete_namespace(ns)

        def delete_pods_now() -> None:
            # A timeout: the delete goes on at the server, and the next run waits for it.
            with contextlib.suppress(OSError, TimeoutError):
                self.cluster.request(
                    "DELETE",
                    f"/api/v1/namespaces/{ns}/pods",
                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                )

        threading.Thread(target=delete_pods_now, name=f"delete {ns}", daemon=True).start()


def job_pods(pods: list[dict[str, Any]], job: str) -> dict[str, str]:
    """The live pods of Job `job`: name -> node."""
    return {
        p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName", "")
        for p in pods
        if (p["metadata"].get("labels") or {}).get(JOB_NAME) == job
        and not p["metadata"].get("deletionTimestamp")
    }


def fail_pod(cluster: FullCluster, ns: str, name: str) -> None:
    """kwok's fail stage: every container exits 3, 100 ms from now."""
    annotations = {
        RUN_FOREVER_ANNOTATION: "false",
        FAIL_EXIT_CODE_ANNOTATION: "3",
        RUN_DURATION_ANNOTATION: "100ms",
    }
    status, reply = cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}",
        {"metadata": {"annotations": annotations}},
        "application/merge-patch+json",
    )
    assert status == 200, reply


# ----------------------------------------------------------------------------- printing
def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def summary(run: Run) -> str:
    if run.error:
        return f"error: {run.error}"
    if run.stuck:
        return run.stuck
    bound, running = seconds(run.total("t4")), seconds(run.total("t5"))
    return f"seconds from the failure to all bound {bound}, to all Running {running}"


def print_table(runs: list[Run], args: argparse.Namespace, nodes: int, lease: int) -> None:
    load = os.getloadavg()
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at the end "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}: {args.racks} Jobs x {args.pods} pods = "
        f"{args.racks * args.pods} pods on {nodes} kwok nodes in {args.racks} racks (node Lease "
        f"{lease} s), grace {args.grace} s, stuck window {args.stuck_window:g} s\n"
    )
    if not runs:
        return
    print(
        "| path | controller | detect t1-t0 | teardown t2-t1 | create t3-t2 | bind t4-t3 | "
        "run t5-t4 | failure to all bound t4-t0 | failure to all Running t5-t0 | controller "
        "CPU s | RSS MiB | load | notes |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for run in runs:
        phases = " | ".join(seconds(run.span(a, b)) for a, b in PHASES)
        notes = [f"**error**: {run.error}"] if run.error else []
        notes += [run.stuck] if run.stuck else []
        notes += run.notes
        print(
            f"| {run.path} | {run.controller} | {phases} | {seconds(run.span('t0', 't4'))} | "
            f"{seconds(run.span('t0', 't5'))} | {seconds(run.cpu_s)} | {seconds(run.rss_mib)} | "
            f"{seconds(run.load)} | {'; '.join(notes)} |"
        )


def ratio(what: str, mine: float | None, base: float | None, goal: float | None = None) -> str:
    if mine is None or base is None:
        return f"- {what}: n/a (a run is missing or did not get there)"
    verdict = (
        ""
        if goal is None
        else f" (goal <= {goal:g}: {'met' if mine / base <= goal else 'not met'})"
    )
    return f"- {what}: {mine:.1f} s / {base:.1f} s = {mine / base:.2f}x{verdict}"


def print_goals(runs: list[Run], args: argparse.Namespace) -> None:
    by = {(r.path, r.controller): r for r in runs}

    def total(path: str, controller: str, end: str = "t5") -> float | None:
        run = by.get((path, controller))
        return None if run is None else run.total(end)

    print("\ngoals, ratios of this run:")
    print(ratio("fast / ours recreate-grace, failure to all bound",
                total("fast", OURS, "t4"), total("recreate-grace", OURS, "t4"), 0.7))  # fmt: skip
    dead, base = total("dead-node", OURS), total("recreate-grace", OURS)
    if dead is not None and base is not None:
        bound = base + args.grace
        print(
            f"- dead-node, ours (force delete): failure to all Running {dead:.1f} s against ours "
            f"recreate-grace {base:.1f} s + the force delete's wait past the grace period "
            f"({args.grace} s) = {bound:.1f} s: {dead / bound:.2f}x"
        )
    else:
        print("- dead-node, ours (force delete): n/a (a run is missing or did not get there)")
    for label in (NO_FORCE_DELETE, UPSTREAM):
        run = by.get(("dead-node", label))
        if run is None:
            state = "not run"
        elif run.stuck:
            state = f"still {run.stuck} (as expected)"
        else:
            state = f"not stuck after {args.stuck_window:g} s: {summary(run)}"
        print(f"- dead-node, {label}: {state}")
    print(ratio("in-place / ours recreate, failure to all Running",
                total("in-place", OURS), total("recreate", OURS), 0.1))  # fmt: skip
    print(ratio("in-place, ours / upstream, failure to all Running",
                total("in-place", OURS), total("in-place", UPSTREAM)))  # fmt: skip
    for path in ("recreate", "recreate-grace"):
        print(ratio(f"{path}, ours / upstream, failure to all Running",
                    total(path, OURS), total(path, UPSTREAM), 1.1))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_cluster_arguments(parser, racks=250, nodes=20, pods=15, profiled="each failure's first")
    parser.add_argument(
        "--paths", nargs="+", choices=PATHS, default=list(PATHS),
        help="restart paths (run in the module docstring's order)",
    )  # fmt: skip
    parser.add_argument(
        "--stuck-window", type=float, default=600.0,
        help="seconds a run expected to stay stuck is given after the failure",
    )  # fmt: skip
    parser.add_argument(
        "--grace", type=int, default=30, help="the held pods' terminationGracePeriodSeconds"
    )
    args = parser.parse_args()
    upstream_bin = ensure_upstream() if args.upstream else None
    workdir = Path(tempfile.mkdtemp(prefix="recovery-bench-"))
    args.profile_dir = Path(tempfile.mkdtemp(prefix="recovery-profiles-"))
    cluster, nodes, lease = start_rack_cluster(args, workdir)
    bench = Bench(args, cluster, nodes, upstream_bin, workdir)
    runs: list[Run] = []
    try:
        for path in (p for p in PATHS if p in args.paths):
            for variant in variants(path, upstream_bin is not None):
                runs.append(bench.run(path, variant))
    finally:
        bench.close()
        cluster.stop()
        print_table(runs, args, len(nodes), lease)  # what was measured, even if cut short
        print_goals(runs, args)
        print_profiles(runs)


if __name__ == "__main__":
    main()
