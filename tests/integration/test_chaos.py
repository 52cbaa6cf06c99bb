"""Crash consistency: `jobset-controller run` SIGKILLed at random moments must never corrupt state.

Why: the controller keeps no state of its own; everything it knows it re-derives from the API
server after a restart. A kill can land between any two of its writes (status raised but old Jobs
not yet deleted, half the new Jobs created, an event not yet flushed). If any step is not
idempotent, or reads its own previous writes wrongly, a restart shows it as a duplicate Job, a
missing Job, a restart counted twice, a JobSet that never finishes, or a write for a JobSet that
no longer exists. This test provokes exactly those windows and checks every one of them.

Set-up: the controller runs as a ServiceAccount bound only to the shipped roles (so the API
server's audit log records every request it makes), without leader election (a killed leader's
Lease would make each restart wait for its expiry; one process at a time runs here anyway). The
test plays the Job controller (KubeSim): it fails one Job per restart attempt while a JobSet has
failures planned, completes Jobs otherwise, and plays the garbage collector for deleted Jobs.

The budget is `JOBSET_CHAOS_KILLS` kills (default 5, about a minute); `JOBSET_CHAOS_SEED` replays
the random choices of a failed run (the seed is printed, and is in every failure message; timing
still differs between runs, so a replay is likely, not certain, to hit the same window).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.api.constants import (
    JOB_INDEX_KEY,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
)
from jobset_controller.runtime.client import ApiError, Gone, KubeClient, NotFound
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import write_configuration
from jobset_controller_dev.envtest.identities import service_account_user, shipped_rbac
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.polling import eventually, scaled
from jobset_controller_dev.envtest.processes import free_port

pytestmark = pytest.mark.chaos

KILLS = int(os.environ.get("JOBSET_CHAOS_KILLS", "5"))
# A fixed default seed: CI runs are reproducible; long runs pick their own (JOBSET_CHAOS_SEED).
SEED = int(os.environ.get("JOBSET_CHAOS_SEED", "20261122"))
ACCOUNT = "controller-manager"
REPLICATED_JOBS = {"driver": 2, "workers": 2}  # name -> replicas: 4 Jobs per attempt
JOBS_PER_ATTEMPT = sum(REPLICATED_JOBS.values())
DOOMED = "doomed"  # the JobSet deleted mid-run; no other JobSet name starts with it
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
CONVERGENCE_TIMEOUT = 240.0

Key = tuple[str, str, str, str]  # (jobset, replicatedJob, job index, restart attempt)


@dataclass
class Plan:
    """What the test will do to one JobSet, and what it has done so far."""

    name: str
    max_restarts: int | None  # None: no failurePolicy (the first failure fails the JobSet)
    failures: int  # Job failures to inject, at most one per restart attempt
    failed_attempts: set[int] = field(default_factory=set)

    @property
    def expect_failed(self) -> bool:
        return self.failures > (self.max_restarts or 0)

    @property
    def expected_restarts(self) -> int:
        """Every injected failure justifies one restart, except the one that exceeds the max."""
        return min(self.failures, self.max_restarts or 0)


def _jobset(plan: Plan) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    spec: dict[str, Any] = {
        "replicatedJobs": [
            {
                "name": name,
                "replicas": replicas,
                "template": {"spec": {"backoffLimit": 0, "template": {"spec": pod}}},
            }
            for name, replicas in REPLICATED_JOBS.items()
        ]
    }
    if plan.max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": plan.max_restarts}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": plan.name},
        "spec": spec,
    }


def _plans(rng: random.Random) -> list[Plan]:
    plans = [Plan("plain-0", None, 0), Plan("plain-1", None, 0), Plan("no-policy-fails", None, 1)]
    for i in range(7):
        most = rng.choice((2, 3))
        plans.append(Plan(f"restarts-{i}", most, rng.randint(1, most)))
    for i in range(2):
        most = rng.choice((1, 2))
        plans.append(Plan(f"exhausts-{i}", most, most + 1))
    plans.append(Plan(DOOMED, 3, 0))
    return plans


def _finished(job: dict[str, Any]) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _key(job: dict[str, Any]) -> Key | None:
    labels = job["metadata"].get("labels") or {}
    if JOBSET_NAME_KEY not in labels:
        return None
    return (
        labels[JOBSET_NAME_KEY],
        labels.get(REPLICATED_JOB_NAME_KEY, "?"),
        labels.get(JOB_INDEX_KEY, "?"),
        labels.get(RESTARTS_KEY, "?"),
    )


class JobHistory:
    """Every Job that ever existed in the namespace, by uid, from a list-then-watch of Jobs.

    The audit log cross-checks it at the end: the controller's successful Job creates must equal
    the Jobs seen here, so a Job created and deleted between two polls cannot go unnoticed.
    """

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.path = kube, f"/apis/batch/v1/namespaces/{namespace}/jobs"
        self.keys: dict[str, Key | None] = {}  # uid -> key
        self.names: dict[str, str] = {}  # uid -> name

    def record(self, job: dict[str, Any]) -> None:
        uid = job["metadata"]["uid"]
        self.keys.setdefault(uid, _key(job))
        self.names.setdefault(uid, job["metadata"]["name"])

    async def relist(self) -> str:
        body = await self.kube.get(self.path)
        for job in body.get("items") or ():
            self.record(job)
        return str(body["metadata"]["resourceVersion"])

    async def run(self) -> None:
        version = await self.relist()
        while True:
            try:
                async for event in self.kube.watch(
                    self.path, params={"resourceVersion": version}, read_timeout=120
                ):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise Gone(int(obj.get("code") or 410), obj, "WATCH", self.path)
                    version = obj["metadata"]["resourceVersion"]
                    if event.get("type") != "BOOKMARK":
                        self.record(obj)
            except asyncio.CancelledError:
                raise
            except Exception:  # expired or broken: list again (and record what is there)
                await asyncio.sleep(0.5)  # a retry's backoff, not a wait for a state
                version = await self.relist()

    def by_key(self) -> dict[Key, list[str]]:
        result: dict[Key, list[str]] = {}
        for uid, key in self.keys.items():
            if key is not None:
                result.setdefault(key, []).append(uid)
        return result


class Controller:
    """`jobset-controller run` as a subprocess, started and SIGKILLed again and again."""

    def __init__(self, kubeconfig: Path, config: Path, logs: Path) -> None:
        self.kubeconfig, self.config, self.logs = kubeconfig, config, logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        assert self.proc is None
        log = (self.logs / f"controller-{self.starts}.log").open("w")
        self.starts += 1
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "jobset_controller", "run",
                f"--kubeconfig={self.kubeconfig}", f"--config={self.config}",
                "--leader-elect=false",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--log-format=json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )  # fmt: skip
        log.close()

    def kill(self) -> None:
        assert self.proc is not None
        exited = self.proc.poll()
        assert exited is None, f"controller exited by itself ({exited}): {self.log_tail()}"
        self.proc.kill()
        self.proc.wait(scaled(30))
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(scaled(30))
        self.proc = None

    def log_tail(self) -> str:
        return (self.logs / f"controller-{self.starts - 1}.log").read_text()[-3000:]


class Driver:
    """Plays the Job controller and the garbage collector for the test's JobSets."""

    def __init__(
        self, kube: KubeClient, namespace: str, plans: list[Plan], rng: random.Random
    ) -> None:
        self.kube, self.namespace, self.rng = kube, namespace, rng
        self.sim = KubeSim(kube, namespace)
        self.plans = {plan.name: plan for plan in plans}
        self.deleted: set[str] = set()
        self.doomed_jobs_touched = False

    def path(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.namespace}/jobsets"
        return f"{base}/{name}" if name else base

    async def jobsets(self) -> dict[str, dict[str, Any]]:
        body = await self.kube.get(self.path())
        return {js["metadata"]["name"]: js for js in body.get("items") or ()}

    async def live_jobs(self) -> dict[str, list[dict[str, Any]]]:
        by_jobset: dict[str, list[dict[str, Any]]] = {}
        for job in await self.sim.jobs():
            key = _key(job)
            if key is not None and not _deleting(job):
                by_jobset.setdefault(key[0], []).append(job)
        return by_jobset

    async def steady_attempt(self, name: str) -> list[dict[str, Any]] | None:
        """The Jobs of the JobSet's current attempt when all exist and no restart is pending."""
        try:
            js = await self.kube.get(self.path(name))
        except NotFound:
            return None
        return self._steady(js, (await self.live_jobs()).get(name, []))

    def _steady(
        self, js: dict[str, Any], jobs: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        status = js.get("status") or {}
        if status.get("terminalState"):
            return None
        attempt = str(status.get("restarts") or 0)
        if len(jobs) != JOBS_PER_ATTEMPT or any(_key(j)[3] != attempt for j in jobs):  # type: ignore[index]
            return None  # a restart is being carried out (or the Jobs are still being created)
        if any(_finished(j) == "Failed" for j in jobs):
            return None  # the failure is not handled yet
        return jobs

    async def step(self) -> None:
        await self.sim.collect_garbage()
        jobsets, jobs = await self.jobsets(), await self.live_jobs()
        for name, plan in self.plans.items():
            if name == DOOMED or name not in jobsets:
                continue
            current = self._steady(jobsets[name], jobs.get(name, []))
            if current is None:
                continue
            attempt = int((jobsets[name].get("status") or {}).get("restarts") or 0)
            unfinished = [j["metadata"]["name"] for j in current if not _finished(j)]
            if not unfinished:
                continue
            if len(plan.failed_attempts) < plan.failures:
                if attempt in plan.failed_attempts:
                    continue
                roll = self.rng.random()
                if roll < 0.4:
                    plan.failed_attempts.add(attempt)
                    await self._write(self.sim.fail, self.rng.choice(unfinished))
                elif roll < 0.6 and len(unfinished) > 1:
                    await self._write(self.sim.complete, self.rng.choice(unfinished))
            elif self.rng.random() < 0.7:
                await self._write(self.sim.complete, self.rng.choice(unfinished))
        if DOOMED in self.deleted and not self.doomed_jobs_touched:
            # The deleted JobSet's Jobs linger (no garbage collector): a failure and a
            # completion on them must not make the controller write anything for it.
            orphans = jobs.get(DOOMED, [])
            if len(orphans) >= 2:
                await self._write(self.sim.fail, orphans[0]["metadata"]["name"])
                await self._write(self.sim.complete, orphans[1]["metadata"]["name"])
                self.doomed_jobs_touched = True

    async def _write(self, action: Any, name: str) -> None:
        with contextlib.suppress(NotFound):  # deleted by the controller a moment ago
            await action(name)

    async def run(self) -> None:
        while True:
            with contextlib.suppress(ApiError):  # e.g. a conflict: the next step retries
                await self.step()
            await asyncio.sleep(0.25)  # the driver's pace: faults come spread out, not at once

    async def all_finished(self) -> bool:
        jobsets = await self.jobsets()
        return all(
            (jobsets.get(name, {}).get("status") or {}).get("terminalState")
            for name in self.plans
            if name not in self.deleted
        )


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _writes_for(events: list[dict[str, Any]], namespace: str, jobset: str) -> list[dict[str, Any]]:
    """Audit events of writes to the JobSet, its Jobs, its Service, or events about it."""
    mine = []
    for event in events:
        ref = event.get("objectRef") or {}
        if event.get("verb") not in WRITE_VERBS or ref.get("namespace") != namespace:
            continue
        name, resource = ref.get("name") or "", ref.get("resource")
        if (
            (resource in ("jobsets", "services") and name == jobset)
            or (resource == "jobs" and name.startswith(f"{jobset}-"))
            or (resource == "events" and name.startswith(f"{jobset}."))
        ):
            mine.append(event)
    return mine


def _describe(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    code = (event.get("responseStatus") or {}).get("code")
    return (
        f"{event['requestReceivedTimestamp']} {event['verb']} {ref.get('resource')}"
        f"/{ref.get('subresource') or ''} {ref.get('name')} -> {code}"
    )


@pytest.fixture
def controller_identity(control_plane: ControlPlane, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A kubeconfig for a fresh ServiceAccount bound to the shipped roles, and its username."""
    home = f"jobset-chaos-{uuid.uuid4().hex[:6]}"
    with shipped_rbac(control_plane, home, [ACCOUNT], tmp_path) as kubeconfigs:
        yield kubeconfigs[ACCOUNT], service_account_user(home, ACCOUNT)
    control_plane.delete_namespace(home)


@contextlib.asynccontextmanager
async def _background(*coroutines: Any) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coroutines]
    try:
        yield
        for task in tasks:
            if task.done():
                task.result()  # surface a crashed helper instead of a vague timeout
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _wait(check: Any, what: str, within: float, seed_note: str) -> None:
    await eventually(check, f"{what} ({seed_note})", within, interval=0.25)


def _job_creates(events: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The audit log's successful Job creates in ``namespace``."""
    return [
        e
        for e in events
        if e["verb"] == "create"
        and e["stage"] == "ResponseComplete"
        and (e.get("objectRef") or {}).get("resource") == "jobs"
        and (e.get("objectRef") or {}).get("namespace") == namespace
        and (e.get("responseStatus") or {}).get("code") == 201
    ]


async def test_sigkilled_controller_never_duplicates_double_counts_or_writes_for_deleted(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    controller_identity: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig, user = controller_identity
    seed_note = f"JOBSET_CHAOS_SEED={SEED} JOBSET_CHAOS_KILLS={KILLS}"
    with capsys.disabled():
        print(f"\n  chaos: {seed_note}")
    rng = random.Random(SEED)
    plans = _plans(rng)
    config = tmp_path / "config.yaml"
    certs = tmp_path / "no-certs"  # no serving certificates: no webhook server
    certs.mkdir()
    write_configuration(
        config,
        {
            "leaderElection": {"leaderElect": False},
            "webhook": {"certDir": str(certs)},
            "internalCertManagement": {"enable": False},
        },
    )
    history = JobHistory(kube, namespace)
    driver = Driver(kube, namespace, plans, rng)
    controller = Controller(kubeconfig, config, tmp_path)
    deleted_at: datetime.datetime | None = None
    restarted_after_delete_at: datetime.datetime | None = None
    try:
        async with _background(history.run(), driver.run()):
            for plan in plans:
                await kube.create(driver.path(), _jobset(plan))
            for cycle in range(KILLS):
                controller.start()
                if cycle > 0 and deleted_at is not None and restarted_after_delete_at is None:
                    restarted_after_delete_at = datetime.datetime.now(datetime.UTC)
                if cycle == min(1, KILLS - 1):
                    # Delete one JobSet while the controller runs, once its Jobs all exist (a
                    # JobSet with nothing left to do: a write now would be for a deleted object).
                    async def doomed_steady() -> bool:
                        return await driver.steady_attempt(DOOMED) is not None

                    await _wait(doomed_steady, "the doomed JobSet's Jobs", 120, seed_note)
                    await asyncio.sleep(rng.uniform(0.0, 1.5))  # a random moment to delete at
                    await kube.delete(driver.path(DOOMED), propagation="Background")
                    deleted_at = datetime.datetime.now(datetime.UTC)
                    driver.deleted.add(DOOMED)
                await asyncio.sleep(rng.uniform(0.3, 5.0))  # a random moment to kill at
                controller.kill()
            controller.start()
            if restarted_after_delete_at is None:
                restarted_after_delete_at = datetime.datetime.now(datetime.UTC)
            await _wait(
                driver.all_finished, "every JobSet finished", CONVERGENCE_TIMEOUT, seed_note
            )

            # Every JobSet is finished, so no Job create is still to come: wait until the watch
            # has seen every create the audit log holds, then take the final picture of every Job.
            async def watch_caught_up() -> bool:
                creates = _job_creates(control_plane.audit_events(user), namespace)
                return len(creates) <= len(history.keys)

            await _wait(watch_caught_up, "the watch seeing every Job create", 60, seed_note)
            await history.relist()
            final = await driver.jobsets()
            assert controller.proc is not None
            assert controller.proc.poll() is None, (
                f"the last controller exited: {controller.log_tail()}"
            )
    finally:
        controller.stop()

    problems: list[str] = []
    # 1. No duplicate Job per (jobset, replicatedJob, index, restart attempt), ever.
    by_key = history.by_key()
    for key, uids in sorted(by_key.items()):
        if len(uids) > 1:
            problems.append(f"duplicate Jobs for {key}: {[history.names[u] for u in uids]}")
    # The watch saw every Job the controller created (nothing slipped between observations).
    events = control_plane.audit_events(user)
    created = _job_creates(events, namespace)
    assert len(created) == len(history.keys), (
        f"{len(created)} Job creates in the audit log, {len(history.keys)} Jobs seen ({seed_note})"
    )

    # 2.-4. Per JobSet: outcome, restarts, Jobs of every attempt the test acted on.
    for name, plan in driver.plans.items():
        if name in driver.deleted:
            continue
        status = final[name].get("status") or {}
        expected_state = "Failed" if plan.expect_failed else "Completed"
        if status.get("terminalState") != expected_state:
            problems.append(f"{name}: {status.get('terminalState')}, expected {expected_state}")
        if len(plan.failed_attempts) != plan.failures:
            problems.append(f"{name}: {len(plan.failed_attempts)} failures injected of {plan}")
        restarts = int(status.get("restarts") or 0)
        if restarts != plan.expected_restarts:
            problems.append(
                f"{name}: status.restarts {restarts}, but {plan.expected_restarts} failures "
                f"justified a restart (failed attempts {sorted(plan.failed_attempts)})"
            )
        counted = int(status.get("restartsCountTowardsMax") or 0)
        if counted != plan.expected_restarts:
            problems.append(f"{name}: restartsCountTowardsMax {counted}")
        attempts = {int(k[3]) for k in by_key if k[0] == name}
        if attempts != set(range(restarts + 1)):
            problems.append(
                f"{name}: Jobs seen for attempts {sorted(attempts)}, restarts {restarts}"
            )
        for attempt in {restarts, *plan.failed_attempts}:
            for rjob, replicas in REPLICATED_JOBS.items():
                for index in range(replicas):
                    if (name, rjob, str(index), str(attempt)) not in by_key:
                        problems.append(f"{name}: no Job {rjob}-{index} of attempt {attempt}")

    # 5. No write for the deleted JobSet: none that succeeded after the delete, none at all from
    # a process started after it (that one never saw the JobSet).
    assert deleted_at is not None
    assert restarted_after_delete_at is not None
    assert driver.doomed_jobs_touched, "the deleted JobSet's Jobs were never failed/completed"
    for event in _writes_for(events, namespace, DOOMED):
        received = _parse_time(event["requestReceivedTimestamp"])
        succeeded = (event.get("responseStatus") or {}).get("code", 0) < 400
        if (received > deleted_at and succeeded) or received > restarted_after_delete_at:
            problems.append(f"write for the deleted JobSet: {_describe(event)}")

    with capsys.disabled():
        print(
            f"  chaos: {controller.starts - 1} kills, {len(history.keys)} Jobs created, "
            f"restarts {sum(p.expected_restarts for p in plans)}, {len(problems)} violations"
        )
    assert problems == [], f"{seed_note}:\n" + "\n".join(problems)
