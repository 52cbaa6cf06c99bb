"""No single JobSet can stall the controller: `jobset-controller run` stays live and keeps working.

The process runs as users run it (a subprocess, RestartJob gate on, probes on 127.0.0.1) while two
hostile JobSets are in flight:

* ``pattern``: a failure-policy rule with ``onJobFailureMessagePatterns: ['^(\\w+\\s?)*\\d$']``
  (catastrophic backtracking for a backtracking engine) and its Job failed with the Job
  controller's ordinary message "Job has reached the specified backoff limit". With RE2 the
  pattern is checked in linear time; the JobSet restarts once and then fails (maxRestarts 1).
* ``huge``: ``replicas: 20000000`` (parallelism 1, so replicas x parallelism fits in int32). Our
  webhook refuses a RestartJob rule with more than 1024 replicas at create, but failurePolicy may
  be *added* by a later update (the CRD's ``self == oldSelf`` only binds a field that existed,
  and update validation does not re-check the bound), so it is created without one and the
  RestartJob rule is patched in, which is how a user reaches the RestartJob path with the webhook
  deployed. Its namespace has a ResourceQuota of one Job (status written by the test, as no
  quota controller runs here), so exactly one Job is created and every other create is refused:
  each pass still plans up to 1000 Jobs (the bound per pass) and reads the per-index restart
  bookkeeping for them (the code that used to build 20-million-long tuples per Job), and the
  failure of the one Job goes through the RestartJob path (refused there with a
  RestartJobTooManyReplicas event, as the per-index arrays are capped at 1024) — without
  creating thousands of Jobs in the API server. Suspending instead would create 1000 suspended
  Jobs per pass, flooding etcd.

Meanwhile a normal JobSet is created and its Jobs completed; it must reach Completed within 20 s
of its last Job finishing (a liveness bound, not a benchmark), and /healthz, polled every 0.2 s in
a thread, must answer 200 every time, each answer within 5 s.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from jobset_controller.api.manifest import check_manifest
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import eventually, scaled

CATASTROPHIC: Final = r"^(\w+\s?)*\d$"
HUGE_REPLICAS: Final = 20_000_000
COMPLETION_BOUND: Final = 20.0
SLOW_POLL: Final = 5.0
RESTARTS_KEY: Final = "jobset.sigs.k8s.io/restart-attempt"


def jobset(name: str, replicas: int = 1, **spec: Any) -> dict[str, Any]:
    workers = replicated_job("w", replicas, pods=1, backoff_limit=0)
    return jobset_manifest(name, replicated_jobs=[workers], **spec)


def jobsets_path(namespace: str, name: str = "") -> str:
    base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    return f"{base}/{name}" if name else base


def has_condition(js: dict[str, Any], kind: str) -> bool:
    conditions = (js.get("status") or {}).get("conditions") or ()
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


@dataclass
class HealthPoller:
    """GET /healthz every 0.2 s in a thread; records every failure and the slowest answer."""

    port: int
    polls: int = 0
    slowest: float = 0.0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=scaled(10))

    def _run(self) -> None:
        url = f"http://127.0.0.1:{self.port}/healthz"
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=scaled(SLOW_POLL + 5)) as reply:
                    status = reply.status
            except urllib.error.HTTPError as error:
                status = error.code
            except OSError as error:
                status = 0
                self.failures.append(f"{type(error).__name__}: {error}")
            took = time.monotonic() - started
            self.polls += 1
            self.slowest = max(self.slowest, took)
            if status not in (0, 200):
                self.failures.append(f"HTTP {status}")
            if took > scaled(SLOW_POLL):  # a liveness bound in wall time: scaled as every wait
                self.failures.append(f"answer took {took:.1f} s")
            self._stop.wait(0.2)


@pytest.fixture
def controller_process(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ControllerProcess]:
    config = tmp_path / "config.yaml"
    write_configuration(
        config,
        {
            "featureGates": {"RestartJob": True},
            # Internal certificates (the default) on a free loopback port, files under tmp.
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path / "certs")},
        },
    )
    process = ControllerProcess(
        kubeconfig=control_plane.kubeconfig,
        config=config,
        log=tmp_path / "controller.log",
        args=["--leader-elect=false", "--log-format=json"],
    )
    try:
        process.wait_ready(60)
        yield process
    finally:
        process.stop(30)


@pytest.fixture
async def quota_namespace(control_plane: ControlPlane, kube: KubeClient) -> AsyncIterator[str]:
    """A namespace where the API server admits one Job, then refuses every other."""
    name = f"quota-{uuid.uuid4().hex[:8]}"
    await kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    quotas = f"/api/v1/namespaces/{name}/resourcequotas"
    hard = {"count/jobs.batch": "1"}
    await kube.create(quotas, {"metadata": {"name": "jobs"}, "spec": {"hard": hard}})
    used = {"count/jobs.batch": "0"}
    await kube.merge_patch(f"{quotas}/jobs/status", {"status": {"hard": hard, "used": used}})
    try:
        yield name
    finally:
        await asyncio.to_thread(control_plane.delete_namespace, name)


async def test_a_catastrophic_pattern_and_huge_replicas_do_not_stall_the_controller(
    controller_process: ControllerProcess,
    kube: KubeClient,
    namespace: str,
    quota_namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sim, huge_sim = KubeSim(kube, namespace), KubeSim(kube, quota_namespace)
    pattern_rule = {
        "name": "byMessage",
        "action": "FailJobSet",
        "onJobFailureMessagePatterns": [CATASTROPHIC],
    }
    pattern = jobset("pattern", failurePolicy={"maxRestarts": 1, "rules": [pattern_rule]})
    huge = jobset("huge", HUGE_REPLICAS)
    restart_rule = {"name": "restartOne", "action": "RestartJob"}
    for document in (pattern, huge):  # both are what `validate` (and our webhook) admit
        assert check_manifest(document).errors == ()

    poller = HealthPoller(controller_process.health_port)
    poller.start()
    try:
        await kube.create(jobsets_path(namespace), pattern)
        await kube.create(jobsets_path(quota_namespace), huge)

        async def one_job(s: KubeSim, prefix: str, attempt: str = "0") -> str | None:
            for job in await s.jobs():
                meta = job["metadata"]
                labels = meta.get("labels") or {}
                deleting = bool(meta.get("deletionTimestamp"))
                mine = meta["name"].startswith(prefix) and labels.get(RESTARTS_KEY) == attempt
                if mine and not deleting:
                    return str(meta["name"])
            return None

        await eventually(lambda: _is_some(one_job(huge_sim, "huge-w-")), "huge's one Job", 30)
        await kube.merge_patch(
            jobsets_path(quota_namespace, "huge"),
            {"spec": {"failurePolicy": {"maxRestarts": 5, "rules": [restart_rule]}}},
        )
        huge_job = await one_job(huge_sim, "huge-w-")
        assert huge_job is not None
        await huge_sim.fail(huge_job)

        await eventually(lambda: _is_some(one_job(sim, "pattern-w-")), "pattern's Job", 30)
        first = await one_job(sim, "pattern-w-")
        assert first is not None
        await sim.fail(first)  # no rule matches: the default action restarts the JobSet

        # While both are in flight: an ordinary JobSet must still be served promptly.
        await kube.create(jobsets_path(namespace), jobset("normal", 2))

        async def normal_jobs() -> bool:
            return (
                len([j for j in await sim.jobs() if j["metadata"]["name"].startswith("normal")])
                == 2
            )

        await eventually(normal_jobs, "normal's Jobs", 30)
        for job in await sim.jobs():
            if job["metadata"]["name"].startswith("normal-"):
                await sim.complete(job["metadata"]["name"])

        async def normal_completed() -> bool:
            return has_condition(await kube.get(jobsets_path(namespace, "normal")), "Completed")

        took = await eventually(normal_completed, "normal Completed", COMPLETION_BOUND)

        # The pattern JobSet restarted once (the pattern evaluated, not matched) and then fails.
        async def restarted() -> bool:
            await sim.collect_garbage()  # the old Job's foreground deletion, as the GC would
            return await one_job(sim, "pattern-w-", "1") is not None

        await eventually(restarted, "pattern restarted", 30)
        second = await one_job(sim, "pattern-w-", "1")
        assert second is not None
        await sim.fail(second)

        async def pattern_failed() -> bool:
            return has_condition(await kube.get(jobsets_path(namespace, "pattern")), "Failed")

        await eventually(pattern_failed, "pattern Failed", 30)

        async def restart_job_refused() -> bool:
            events = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{quota_namespace}/events")
            return any(
                e.get("reason") == "RestartJobTooManyReplicas" for e in events.get("items") or ()
            )

        await eventually(restart_job_refused, "huge's RestartJob path", 30)
        # Huge stays in its loop of refused creates (retried with backoff): /healthz must keep
        # answering meanwhile. Wait for five more answers, not for a fixed time.
        polls = poller.polls
        await eventually(lambda: poller.polls >= polls + 5, "five more /healthz polls", 30)
    finally:
        poller.stop()
    assert controller_process.proc.poll() is None, controller_process.log.read_text()[-3000:]
    refused = refused_passes(controller_process.log, quota_namespace, "huge")
    with capsys.disabled():
        print(
            f"\n  loop stall: normal JobSet Completed {took:.2f} s after its Jobs; /healthz "
            f"{poller.polls} polls, slowest {poller.slowest:.3f} s, {len(poller.failures)} failed;"
            f" {refused} refused passes of huge"
        )
    assert refused >= 1  # the hostile passes did run while /healthz was polled
    assert poller.polls >= 5
    assert poller.failures == []


def refused_passes(log: Path, namespace: str, name: str) -> int:
    """Passes of JobSet ``namespace/name`` that failed (the worker's log records of them)."""
    count = 0
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and record.get("msg") == "reconcile failed, will retry with backoff"
            and (record.get("namespace"), record.get("jobset")) == (namespace, name)
        ):
            count += 1
    return count


async def _is_some(value: Awaitable[object]) -> bool:
    return await value is not None
