"""What the soak sees from outside the controller: a list-then-watch of JobSets, Jobs, Pods and
Events in the soak's namespace, folded into one `Record` per JobSet.

Why from outside: the invariants must hold whatever the controller believes, so they are judged on
the API server's objects, as a user's `kubectl get -w` would see them. A watch that breaks (410
after a compaction, the API server restarting) lists again; an object that vanished between two
lists counts as deleted. Times are the observer's monotonic clock when it saw a change.

The observer also plays the part of a failing training process: when a pod of an attempt the
workload names (`Workload.inject`) is Running, it makes that pod fail (kwok's fail stage), once per
attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from jobset_controller.api.constants import JOBSET_NAME_KEY, RESTARTS_KEY
from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
)
from jobset_controller_dev.soak.mix import Workload

Handler = Callable[[str, dict[str, Any]], None]


@dataclass
class JobSeen:
    attempt: int
    created: str  # creationTimestamp (RFC 3339, seconds)
    active: bool


@dataclass
class Record:
    """One JobSet's history as observed."""

    workload: Workload
    created: float
    last_progress: float
    last_pod_event: float | None = None
    terminal: str | None = None
    terminal_seen: float | None = None
    pod_event_before_terminal: float | None = None
    # When a Job of this JobSet was last seen to finish (its Complete or Failed condition): the
    # moment the JobSet controller can act, once kube-controller-manager's Job controller has
    # counted the pods. Apart from the last pod event, it tells the cluster's delay from ours.
    last_job_end: float | None = None
    job_end_before_terminal: float | None = None
    restarts: int = 0
    restarts_at_terminal: int | None = None
    # restart count -> wall-clock second (RFC 3339) when the observer first saw it
    restart_seen_wall: dict[int, str] = field(default_factory=dict)
    # restart count -> monotonic time the observer first saw it
    restart_seen: dict[int, float] = field(default_factory=dict)
    suspended: bool = False
    deleted_seen: float | None = None
    version: str = ""
    jobs: dict[str, JobSeen] = field(default_factory=dict)
    pods: dict[str, str] = field(default_factory=dict)  # uid -> phase
    injected: set[int] = field(default_factory=set)
    # pod uid -> attempt of each pod the observer failed; an attempt moves to `failed_by_us` once
    # that pod ended Failed (on a loaded machine the pod may succeed before the patch lands).
    injected_pods: dict[str, int] = field(default_factory=dict)
    failed_by_us: set[int] = field(default_factory=set)
    events: set[str] = field(default_factory=set)
    judged: bool = False  # judged (and deleted) by the soak's janitor before the end


def _wall_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _terminal(obj: dict[str, Any]) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") in ("Completed", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


def _job_finished(job: dict[str, Any]) -> bool:
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return True
    return False


def _job_active(job: dict[str, Any]) -> bool:
    return not job["metadata"].get("deletionTimestamp") and not _job_finished(job)


class Observer:
    """Records per JobSet name; `expect` registers a workload before its create is sent."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.records: dict[str, Record] = {}
        self.relists = 0
        self.injections = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def expect(self, workload: Workload) -> Record:
        now = time.monotonic()
        record = Record(workload=workload, created=now, last_progress=now)
        self.records[workload.name] = record
        return record

    # ----------------------------------------------------------------------- watches
    def watches(self) -> list[Awaitable[None]]:
        ns = self.namespace
        return [
            self._follow(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", self._jobset),
            self._follow(f"/apis/batch/v1/namespaces/{ns}/jobs", self._job),
            self._follow(f"/api/v1/namespaces/{ns}/pods", self._pod),
            self._follow(f"/api/v1/namespaces/{ns}/events", self._event),
        ]

    async def _follow(self, path: str, handle: Handler) -> None:
        """List, then watch from the list's version; on any break list again, and report objects
        gone since the last list as DELETED."""
        known: dict[str, dict[str, Any]] = {}
        while True:
            try:
                listed = await self.kube.get(path)
                items = {o["metadata"]["uid"]: o for o in listed.get("items") or ()}
                for uid, obj in known.items():
                    if uid not in items:
                        handle("DELETED", obj)
                for obj in items.values():
                    handle("MODIFIED", obj)
                known = {uid: _skeleton(o) for uid, o in items.items()}
                version = listed["metadata"]["resourceVersion"]
                async for event in self.kube.watch(
                    path,
                    params={"resourceVersion": version, "allowWatchBookmarks": True},
                    read_timeout=90,
                ):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        break
                    if kind == "BOOKMARK":
                        continue
                    uid = obj["metadata"]["uid"]
                    if kind == "DELETED":
                        known.pop(uid, None)
                    else:
                        known[uid] = _skeleton(obj)
                    handle(str(kind), obj)
            except asyncio.CancelledError:
                raise
            except (ApiError, OSError, TimeoutError, ValueError, KeyError):
                pass
            self.relists += 1
            await asyncio.sleep(0.5)  # a retry's pause before listing again, not a wait for state

    # ----------------------------------------------------------------------- handlers
    def _jobset(self, kind: str, obj: dict[str, Any]) -> None:
        record = self.records.get(obj["metadata"]["name"])
        if record is None:
            return
        now = time.monotonic()
        if kind == "DELETED":
            if record.deleted_seen is None:
                record.deleted_seen = now
            return
        version = obj["metadata"].get("resourceVersion", "")
        if version != record.version:
            record.version = version
            record.last_progress = now
        status = obj.get("status") or {}
        restarts = int(status.get("restarts") or 0)
        if restarts != record.restarts or restarts not in record.restart_seen_wall:
            record.restart_seen_wall.setdefault(restarts, _wall_now())
            record.restart_seen.setdefault(restarts, now)
        record.restarts = restarts
        record.suspended = bool((obj.get("spec") or {}).get("suspend"))
        terminal = _terminal(obj)
        if terminal and record.terminal is None:
            record.terminal, record.terminal_seen = terminal, now
            record.restarts_at_terminal = restarts
            record.pod_event_before_terminal = record.last_pod_event
            record.job_end_before_terminal = record.last_job_end

    def _job(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        record = self.records.get((meta.get("labels") or {}).get(JOBSET_NAME_KEY, ""))
        if record is None:
            return
        now = time.monotonic()
        record.last_progress = now
        uid = meta["uid"]
        if kind == "DELETED":
            record.jobs.pop(uid, None)
            return
        attempt = int((meta.get("labels") or {}).get(RESTARTS_KEY) or 0)
        seen = record.jobs.get(uid)
        if _job_finished(obj) and (seen is None or seen.active):
            record.last_job_end = now
        record.jobs[uid] = JobSeen(attempt, meta.get("creationTimestamp", ""), _job_active(obj))

    def _pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        record = self.records.get(labels.get(JOBSET_NAME_KEY, ""))
        if record is None:
            return
        now = time.monotonic()
        uid = meta["uid"]
        phase = "Gone" if kind == "DELETED" else (obj.get("status") or {}).get("phase", "")
        if meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed", "Gone"):
            phase = "Terminating"
        if record.pods.get(uid) != phase:
            record.last_pod_event = record.last_progress = now
            if phase == "Gone":
                record.pods.pop(uid, None)
            else:
                record.pods[uid] = phase
        attempt = int(labels.get(RESTARTS_KEY) or 0)
        if phase == "Failed" and uid in record.injected_pods:
            record.failed_by_us.add(record.injected_pods[uid])
        due = attempt in record.workload.inject and attempt not in record.injected
        if phase == "Running" and due:
            record.injected.add(attempt)
            record.injected_pods[uid] = attempt
            self.spawn(self._fail_pod(meta["name"]))

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        involved = obj.get("involvedObject") or {}
        if involved.get("kind") != "JobSet":
            return
        record = self.records.get(involved.get("name", ""))
        if record is not None and obj.get("reason"):
            record.events.add(str(obj["reason"]))

    # ----------------------------------------------------------------------- injection
    def spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fail_pod(self, name: str) -> None:
        """kwok's fail stage on one running pod: its container exits 1, 100 ms from now."""
        annotations = {FAIL_EXIT_CODE_ANNOTATION: "1", RUN_DURATION_ANNOTATION: "100ms"}
        path = f"/api/v1/namespaces/{self.namespace}/pods/{name}"
        for _ in range(20):
            with contextlib.suppress(ApiError, OSError, TimeoutError):
                await self.kube.merge_patch(path, {"metadata": {"annotations": annotations}})
                self.injections += 1
                return
            await asyncio.sleep(1)  # the API server is restarting; try again shortly


def _skeleton(obj: dict[str, Any]) -> dict[str, Any]:
    """What a DELETED notice after a relist needs: the object's metadata."""
    return {"metadata": obj["metadata"]}
