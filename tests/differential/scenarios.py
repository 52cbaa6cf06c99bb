"""The scenarios both controllers run: every file in examples/ and a table of the policies.

A scenario is a JobSet (its id is also its namespace and, for the table, its name) and a driver:
the steps that bring it from one state to the next (create, fail or end a pod, suspend, resume),
each waiting on a condition, and checkpoints where the whole comparable state is recorded
(`Run.settle`). The same driver runs on each side, in its own thread, all scenarios at once.

When is a state settled (what a checkpoint waits for): the scenario's own condition holds (a
terminal state reached with no active or deleting Job left; every replicatedJob's Jobs ready;
suspended; the JobSet gone), AND nothing in the scenario's namespace has changed for QUIET
seconds (no JobSet, Job, pod, Service, claim or JobSet Event added, changed or removed there),
AND the controller's JobSet work queue has been seen idle (nothing queued, nothing in flight:
`sides.Idleness`) at a moment starting SEEN seconds after that last change. The controller acts
on every change it sees, so once it has had the time to see the last change and then had
nothing left to do, it has finished with the namespace (its status write and the Events after
it included): a quiet period alone is not enough, upstream's single worker can be seconds
behind while the two clusters run every scenario at once.

Pods are kwok's (envtest/kwok_stages.py): they run for 2 s and succeed unless an annotation in
the template says otherwise (`run-forever`, `fail-exit-code`, `ready-after`). A pod the test
wants to end is patched (`Run.end_pod`), which is what makes one attempt fail and the next
succeed. Example files are used as they are except where a race would decide the outcome or
where exclusive placement needs its reserved racks (see `EXAMPLE_OVERRIDES`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from tests.differential.compare import JOBSET_NAME, RESTART_ATTEMPT, view
from tests.differential.sides import (
    NODE_SELECTOR_RACKS,
    RESERVED_EXCLUSIVE,
    RESERVED_LABEL,
    Side,
)

from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    READY_AFTER_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import NAMESPACED_JOB_LABEL, RACK_LABEL

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
QUIET = 2.0
# How long the controller may take to see a change (its watch) before its idle queue counts.
SEEN = 1.0
TIMEOUT = 180.0
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
FOREVER = {RUN_FOREVER_ANNOTATION: "true"}

View = dict[str, Any]


class Run:
    """One scenario on one side: what its driver may do and wait for."""

    def __init__(self, side: Side, scenario: Scenario) -> None:
        assert side.cache is not None
        self.side = side
        self.cache = side.cache
        self.cluster = side.cluster
        self.scenario = scenario
        self.ns = scenario.id
        self.name = scenario.manifest["metadata"]["name"]
        self.checkpoints: dict[str, View] = {}

    # ------------------------------------------------------------------------------ acting
    def create(self) -> None:
        status, reply = self.cluster.request(
            "POST", JOBSETS.format(ns=self.ns), self.scenario.manifest
        )
        assert status == 201, reply
        # Conditions such as `gone` must not hold before the cache has seen it.
        self.wait(lambda: self.jobset() is not None, "the JobSet in the cache")

    def patch(self, patch: Mapping[str, Any]) -> None:
        path = JOBSETS.format(ns=self.ns) + f"/{self.name}"
        status, reply = self.cluster.request(
            "PATCH", path, dict(patch), "application/merge-patch+json"
        )
        assert status == 200, reply

    def end_pod(self, pod: Mapping[str, Any], fail: int | None = None) -> None:
        """Let a run-forever pod end: succeed, or fail with exit code `fail`."""
        annotations = {RUN_FOREVER_ANNOTATION: "false"}
        if fail is not None:
            annotations[FAIL_EXIT_CODE_ANNOTATION] = str(fail)
        status, reply = self.cluster.request(
            "PATCH",
            f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}",
            {"metadata": {"annotations": annotations}},
            "application/merge-patch+json",
        )
        assert status == 200, reply

    # ------------------------------------------------------------------------------ reading
    def wait(self, check: Callable[[], T | None], what: str, timeout: float = TIMEOUT) -> T:
        """`Cache.wait` (which scales `timeout`) on this run's namespace."""
        return self.cache.wait(check, f"{self.side.name}/{self.ns}: {what}", timeout)

    def jobset(self) -> dict[str, Any] | None:
        return self.cache.get("jobsets", self.ns, self.name)

    def jobs(self) -> list[dict[str, Any]]:
        return self.cache.items("jobs", self.ns)

    def pods(self, *, attempt: int | None = None, rjob: str | None = None) -> list[dict[str, Any]]:
        """Live (not deleted, not finished) pods, optionally of one attempt and replicatedJob."""
        found = []
        for pod in self.cache.items("pods", self.ns):
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if attempt is not None and labels.get(RESTART_ATTEMPT) != str(attempt):
                continue
            if rjob is not None and labels.get(REPLICATED_JOB) != rjob:
                continue
            found.append(pod)
        return sorted(found, key=lambda p: p["metadata"]["name"])

    def ready_pods(self, count: int, **selection: Any) -> list[dict[str, Any]]:
        """Wait for `count` Ready pods (of an attempt / replicatedJob) and return them."""

        def ready() -> list[dict[str, Any]] | None:
            pods = [p for p in self.pods(**selection) if _true(p, "Ready")]
            return pods if len(pods) == count else None

        return self.wait(ready, f"{count} ready pods {selection}")

    def settle(self, checkpoint: str, check: Callable[[Run], bool]) -> None:
        """Wait until `check` holds and the namespace has been quiet for QUIET s; record the
        view (see the module docstring)."""

        idleness = self.side.idleness
        assert idleness is not None

        def settled() -> View | None:
            if not check(self) or self.cache.quiet_for(self.ns) < QUIET:
                return None
            if idleness.last < self.cache.changed_at.get(self.ns, 0.0) + SEEN:
                return None
            return view(self.cache, self.ns, self.name, ordered=self.scenario.ordered)

        self.checkpoints[checkpoint] = self.wait(settled, f"settled at {checkpoint}")


# ------------------------------------------------------------------------------ conditions
def _true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _jobs_quiet(run: Run, *, finished: bool) -> bool:
    """No Job being deleted; with `finished`, every Job Complete or Failed."""
    for job in run.jobs():
        if job["metadata"].get("deletionTimestamp"):
            return False
        if finished and not (_true(job, "Complete") or _true(job, "Failed")):
            return False
    return True


def terminal(state: str, restarts: int | None = None) -> Callable[[Run], bool]:
    def check(run: Run) -> bool:
        js = run.jobset()
        status = (js or {}).get("status") or {}
        if status.get("terminalState") != state:
            return False
        if restarts is not None and status.get("restarts", 0) != restarts:
            return False
        return _jobs_quiet(run, finished=True)

    return check


def running(restarts: int = 0) -> Callable[[Run], bool]:
    """Every replicatedJob counts all its replicas ready (or succeeded), at `restarts`."""

    def check(run: Run) -> bool:
        js = run.jobset()
        if js is None:
            return False
        status = js.get("status") or {}
        if status.get("restarts", 0) != restarts or status.get("terminalState"):
            return False
        counts = {r["name"]: r for r in status.get("replicatedJobsStatus") or ()}
        for rjob in js["spec"]["replicatedJobs"]:
            entry = counts.get(rjob["name"]) or {}
            if entry.get("ready", 0) + entry.get("succeeded", 0) != rjob.get("replicas", 1):
                return False
        return _jobs_quiet(run, finished=False)

    return check


def suspended(run: Run) -> bool:
    js = run.jobset()
    if not _true(js, "Suspended"):
        return False
    return all(j["spec"].get("suspend") for j in run.jobs()) and _jobs_quiet(run, finished=False)


def gone(run: Run) -> bool:
    return run.jobset() is None and not run.jobs()


def untouched(run: Run) -> bool:
    """Created, and nothing acted on it (another controller manages it)."""
    return run.jobset() is not None


# ------------------------------------------------------------------------------ the table
Drive = Callable[[Run], None]


@dataclass(frozen=True)
class Scenario:
    """`id` is also the namespace. `ordered`: its Jobs wait on each other (InOrder, dependsOn),
    so creation rounds are compared by time (`compare.creation_rounds`). `volumes`: hostPath
    PersistentVolumes it needs. `reserve_nodes`: node -> labels set before it runs."""

    id: str
    manifest: dict[str, Any]
    drive: Drive
    ordered: bool = False
    volumes: int = 0
    reserve_nodes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def to_end(state: str = "Completed", restarts: int | None = None) -> Drive:
    def drive(run: Run) -> None:
        run.create()
        run.settle("end", terminal(state, restarts))

    return drive


def rj(
    name: str,
    replicas: int = 1,
    pods: int = 1,
    annotations: Mapping[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    job_fields = {k: fields.pop(k) for k in list(fields) if k in _JOB_SPEC_FIELDS}
    body = replicated_job(
        name, replicas, pods=pods, backoff_limit=job_fields.pop("backoffLimit", 0),
        annotations=dict(annotations or {}), **fields,
    )  # fmt: skip
    body["template"]["spec"].update(job_fields)
    return body


_JOB_SPEC_FIELDS = frozenset(
    {"backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy",
     "activeDeadlineSeconds"}
)  # fmt: skip


def js(name: str, *rjobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return jobset_manifest(name, replicated_jobs=rjobs, **spec)


def fail_then_succeed(code: int, attempts: int, pods: int, rjob: str = "w") -> Drive:
    """Pods run forever; in each of the first `attempts` attempts the first pod of `rjob` fails
    with exit code `code`; then every pod of the next attempt succeeds."""

    def drive(run: Run) -> None:
        run.create()
        for attempt in range(attempts):
            run.ready_pods(pods, attempt=attempt)
            run.settle(f"running-{attempt}", running(attempt))
            run.end_pod(run.pods(attempt=attempt, rjob=rjob)[0], fail=code)
        for pod in run.ready_pods(pods, attempt=attempts):
            run.end_pod(pod)
        run.settle("end", terminal("Completed", attempts))

    return drive


def fail_each_attempt(code: int, attempts: int, pods: int, rjob: str = "w") -> Drive:
    """Pods run forever; in each of `attempts` attempts, once every replicatedJob counts its pods
    ready on this side, the first pod of `rjob` fails with exit code `code`; the JobSet ends
    Failed after `attempts - 1` restarts.

    Why not pods that fail on a timer (kwok's run duration): the ready state before the failure
    then lasts 2 s, and a controller slowed by a loaded machine may never observe it, so whether
    it emits JobsReady ("all jobs are ready") was a race (seen at a load of 30: upstream emitted
    it, ours did not). Failing only once the side has settled at "running" makes both observe it.
    """

    def drive(run: Run) -> None:
        run.create()
        for attempt in range(attempts):
            run.ready_pods(pods, attempt=attempt)
            run.settle(f"running-{attempt}", running(attempt))
            run.end_pod(run.pods(attempt=attempt, rjob=rjob)[0], fail=code)
        run.settle("end", terminal("Failed", attempts - 1))

    return drive


def suspend_change_resume(run: Run) -> None:
    run.create()
    run.ready_pods(2)
    run.settle("running", running())
    run.patch({"spec": {"suspend": True}})
    run.settle("suspended", suspended)
    spec = copy.deepcopy(run.jobset() or {})["spec"]
    spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        RACK_LABEL: "rack-1"
    }
    spec["suspend"] = False  # in the same update, as Kueue admits a workload
    run.patch({"spec": spec})
    run.ready_pods(2)
    run.settle("resumed", running())


def suspended_example(run: Run) -> None:
    run.create()
    run.settle("suspended", suspended)
    run.patch({"spec": {"suspend": False}})
    run.settle("end", terminal("Completed"))


def until_running(run: Run) -> None:
    run.create()
    run.settle("running", running())


def never_touched(run: Run) -> None:
    run.create()
    run.settle("end", untouched)


def until_gone(run: Run) -> None:
    run.create()
    run.settle("end", gone)


def _reserved(manifest: dict[str, Any]) -> dict[str, Any]:
    """Affinity-strategy exclusive placement on the reserved racks: select and tolerate them."""
    for rjob in manifest["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        selector = pod.get("nodeSelector") or {}
        pod["nodeSelector"] = {**selector, RESERVED_LABEL: RESERVED_EXCLUSIVE}
        pod["tolerations"] = [
            *(pod.get("tolerations") or ()),
            {"key": RESERVED_LABEL, "operator": "Equal", "value": RESERVED_EXCLUSIVE,
             "effect": "NoSchedule"},
        ]  # fmt: skip
    return manifest


def _leader_forever(manifest: dict[str, Any]) -> dict[str, Any]:
    """success-policy: the leader (sleep 600 in a real cluster) must outlive the workers; kwok's
    2 s would let it race them."""
    leader = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    leader.setdefault("metadata", {}).setdefault("annotations", {}).update(FOREVER)
    return manifest


EXAMPLE_OVERRIDES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "multislice-exclusive": _reserved,
    "success-policy": _leader_forever,
}
EXAMPLE_DRIVES: dict[str, Drive] = {"suspend-resume": suspended_example}
EXAMPLE_VOLUMES = {"volume-claim-policies": 4}


def examples() -> list[Scenario]:
    found: list[Scenario] = []
    for path in EXAMPLES:
        manifest = yaml.safe_load(path.read_text())
        override = EXAMPLE_OVERRIDES.get(path.stem)
        if override is not None:
            manifest = override(manifest)
        ordered = any(r.get("dependsOn") for r in manifest["spec"]["replicatedJobs"])
        found.append(
            Scenario(
                f"example-{path.stem}",
                manifest,
                EXAMPLE_DRIVES.get(path.stem, to_end()),
                ordered=ordered,
                volumes=EXAMPLE_VOLUMES.get(path.stem, 0),
            )
        )
    return found


FAILS = {FAIL_EXIT_CODE_ANNOTATION: "3"}


def table() -> list[Scenario]:
    pfp_42 = {
        "rules": [{"action": "FailJob",
                   "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]
    }  # fmt: skip
    selector_ns = "nodeselector-exclusive"
    selector_annotations = {EXCLUSIVE: RACK_LABEL, NODE_SELECTOR_STRATEGY: "true"}
    # fmt: off
    return [
        # --- failure policy: every action, reasons, message patterns, targets ---------------
        Scenario(
            "fail-default",
            js("fail-default", rj("w", annotations=FOREVER)),
            fail_each_attempt(3, 1, 1),
        ),
        Scenario(
            "fail-max-restarts",
            js("fail-max-restarts", rj("leader", annotations=FOREVER), rj("w", annotations=FOREVER),
               failurePolicy={"maxRestarts": 1}),
            fail_each_attempt(3, 2, 2),
        ),
        Scenario(
            "fail-blocking-recreate",
            js("fail-blocking-recreate", rj("leader", annotations=FOREVER),
               rj("w", annotations=FOREVER),
               failurePolicy={"maxRestarts": 1, "restartStrategy": "BlockingRecreate"}),
            fail_each_attempt(3, 2, 2),
        ),
        Scenario(
            "fail-rule-failjobset",
            js("fail-rule-failjobset",
               rj("leader", annotations={FAIL_EXIT_CODE_ANNOTATION: "42"}, podFailurePolicy=pfp_42),
               rj("workers", replicas=2, annotations=FOREVER),
               failurePolicy={"maxRestarts": 3, "rules": [
                   {"name": "leaderPodFailurePolicy", "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "targetReplicatedJobs": ["leader"]}]}),
            to_end("Failed"),
        ),
        Scenario(
            "fail-rule-ignore-max",
            js("fail-rule-ignore-max", rj("w", replicas=2, annotations=FOREVER),
               failurePolicy={"maxRestarts": 0, "rules": [
                   {"name": "backoff", "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureMessagePatterns": ["no match here", "backoff limit"]}]}),
            fail_then_succeed(3, attempts=1, pods=2),
        ),
        Scenario(
            "fail-rule-restart-target",
            js("fail-rule-restart-target", rj("driver", annotations=FOREVER),
               rj("w", annotations=FOREVER),
               failurePolicy={"maxRestarts": 2, "rules": [
                   {"name": "driverOnly", "action": "FailJobSet",
                    "targetReplicatedJobs": ["driver"]},
                   {"name": "retryWorkers", "action": "RestartJobSet",
                    "onJobFailureReasons": ["BackoffLimitExceeded"],
                    "targetReplicatedJobs": ["w"]}]}),
            fail_then_succeed(3, attempts=2, pods=2),
        ),
        Scenario(
            "fail-deadline",
            js("fail-deadline", rj("w", annotations=FOREVER, activeDeadlineSeconds=3),
               failurePolicy={"rules": [
                   {"name": "deadline", "action": "FailJobSet",
                    "onJobFailureReasons": ["DeadlineExceeded"]}]}),
            to_end("Failed"),
        ),
        Scenario(
            "fail-max-failed-indexes",
            js("fail-max-failed-indexes",
               rj("w", pods=2, annotations=FAILS, backoffLimit=None, backoffLimitPerIndex=0,
                  maxFailedIndexes=0),
               failurePolicy={"maxRestarts": 2, "rules": [
                   {"name": "tooMany", "action": "FailJobSet",
                    "onJobFailureReasons": ["MaxFailedIndexesExceeded"]}]}),
            to_end("Failed"),
        ),
        Scenario(
            "fail-failed-indexes",
            js("fail-failed-indexes",
               rj("w", pods=2, annotations=FAILS, backoffLimit=None, backoffLimitPerIndex=0),
               failurePolicy={"maxRestarts": 1, "rules": [
                   {"name": "indexes", "action": "RestartJobSet",
                    "onJobFailureReasons": ["FailedIndexes"]}]}),
            to_end("Failed", restarts=1),
        ),
        # --- success policy ------------------------------------------------------------------
        Scenario(
            "success-any",
            js("success-any", rj("fast", annotations={RUN_DURATION_ANNOTATION: "1s"}),
               rj("slow", replicas=2, annotations=FOREVER),
               successPolicy={"operator": "Any", "targetReplicatedJobs": ["fast", "slow"]}),
            to_end(),
        ),
        Scenario(
            "success-all-targeted",
            js("success-all-targeted", rj("leader", annotations=FOREVER),
               rj("w", replicas=2, pods=2),
               successPolicy={"operator": "All", "targetReplicatedJobs": ["w"]}),
            to_end(),
        ),
        # --- startup order and dependsOn -----------------------------------------------------
        Scenario(
            "in-order",
            js("in-order",
               rj("driver", annotations={READY_AFTER_ANNOTATION: "3s", **FOREVER}),
               rj("workers", replicas=2, annotations=FOREVER),
               startupPolicy={"startupPolicyOrder": "InOrder"}),
            until_running, ordered=True,
        ),
        Scenario(
            "depends-on-ready",
            js("depends-on-ready",
               rj("init", annotations={READY_AFTER_ANNOTATION: "3s", **FOREVER}),
               rj("trainer", replicas=2, annotations=FOREVER,
                  dependsOn=[{"name": "init", "status": "Ready"}])),
            until_running, ordered=True,
        ),
        # --- suspend, change the nodeSelector, resume ----------------------------------------
        Scenario(
            "suspend-resume",
            js("suspend-resume", rj("w", replicas=2, annotations=FOREVER,
                                    pod_spec={"nodeSelector": {RACK_LABEL: "rack-0"}})),
            suspend_change_resume,
        ),
        # --- TTL -----------------------------------------------------------------------------
        Scenario(
            "ttl",
            js("ttl", rj("w", replicas=2, annotations={RUN_DURATION_ANNOTATION: "1s"}),
               ttlSecondsAfterFinished=2),
            until_gone,
        ),
        # --- coordinator (with a custom subdomain) -------------------------------------------
        Scenario(
            "coordinator",
            js("coordinator", rj("driver"), rj("w", replicas=2, pods=2),
               coordinator={"replicatedJob": "w", "jobIndex": 1, "podIndex": 1},
               network={"subdomain": "net", "publishNotReadyAddresses": False}),
            to_end(),
        ),
        # --- exclusive placement, both strategies --------------------------------------------
        Scenario(
            "exclusive-affinity",
            _reserved(js("exclusive-affinity", rj("slice", replicas=2, pods=2,
                                                  annotations=FOREVER)))
            | {"metadata": {"name": "exclusive-affinity",
                            "annotations": {EXCLUSIVE: RACK_LABEL}}},
            until_running,
        ),
        Scenario(
            selector_ns,
            js(selector_ns, rj("slice", replicas=2, pods=2, annotations=FOREVER))
            | {"metadata": {"name": selector_ns, "annotations": selector_annotations}},
            until_running,
            reserve_nodes={
                f"kwok-r{rack}-n0": {NAMESPACED_JOB_LABEL: f"{selector_ns}_{selector_ns}-slice-{i}"}
                for i, rack in enumerate(NODE_SELECTOR_RACKS)
            },
        ),
        # --- managedBy -----------------------------------------------------------------------
        Scenario(
            "managed-by-other",
            js("managed-by-other", rj("w"), managedBy="example.com/other-controller"),
            never_touched,
        ),
        Scenario(
            "managed-by-jobset",
            js("managed-by-jobset", rj("w"), managedBy="jobset.sigs.k8s.io/jobset-controller"),
            to_end(),
        ),
    ]
    # fmt: on


def all_scenarios() -> list[Scenario]:
    return examples() + table()


def label_of(pod: Mapping[str, Any], key: str) -> str:
    return str((pod["metadata"].get("labels") or {}).get(key, ""))


__all__ = ["JOBSET_NAME", "Run", "Scenario", "all_scenarios"]
