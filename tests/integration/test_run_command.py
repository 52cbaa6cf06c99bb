"""`jobset-controller run` as users run it: leader election between processes, probes, metrics.

Every process runs as its own ServiceAccount bound only to the shipped roles (manifests/rbac), so
the API server's audit log tells the processes apart and a grant they lack fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import write_configuration
from jobset_controller_dev.envtest.identities import service_account_user, shipped_rbac
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import free_port

LEASE_NAME = "6d4f6a47.jobset.x-k8s.io"
LEASE, RENEW, RETRY = 6.0, 5.0, 1.0
# One ServiceAccount per process a test starts (at most three), all bound to the shipped roles.
ACCOUNTS = ("controller-a", "controller-b", "controller-c")
# Takeover bounds, as in test_leader_election.py: client-go's (the Lease runs out, or was
# released, then the standby's next jittered retry) plus slack for a loaded 2-core machine (after
# a kill it also covers the standby's up to RETRY x 2.2 late view of the last renewal). The
# SIGTERM bound stays below LEASE, so meeting it shows the Lease was released, not waited out.
# The waits for a takeover are generous (TAKEOVER_WAIT): these bounds, asserted once the figures
# are printed, decide. Both are wall time on this machine, so they are scaled as every wait is
# (JOBSET_TEST_TIMEOUT_SCALE): a scale of 2 or more lifts the SIGTERM bound past LEASE, where
# meeting it no longer tells a release from a Lease run out; at the default scale it does.
TAKEOVER_AFTER_KILL = LEASE + RETRY * 2.2 + 4.0
TAKEOVER_AFTER_RELEASE = RETRY * 2.2 + 3.0
TAKEOVER_WAIT = 30.0
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


class Controller:
    """One `jobset-controller run` process with its own metrics and probe ports; ``user`` is its
    identity as the audit log names it ("" when it is not a ServiceAccount)."""

    def __init__(self, kubeconfig: Path, config: Path, log: Path, user: str = "") -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log, self.user = log, user
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobset_controller",
                "run",
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                # Plain HTTP: these tests read metrics to follow leadership; the secure
                # endpoint (HTTPS, reviewed tokens) is test_metrics_security.py's subject.
                "--metrics-secure=false",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--leader-elect",
                "--log-format=json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            url = f"http://127.0.0.1:{port}{path}"
            with urllib.request.urlopen(url, timeout=scaled(5)) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return 0, ""

    def metric(self, line_start: str) -> float | None:
        status, body = self.get(self.metrics_port, "/metrics")
        if status != 200:
            return None
        for line in body.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None

    def is_leader(self) -> bool:
        return self.metric(f'leader_election_master_status{{name="{LEASE_NAME}"}}') == 1.0

    def describe(self) -> str:
        """What a failed wait on this process needs: alive or not, /readyz, leadership."""
        code = self.proc.poll()
        if code is not None:
            return f"pid {self.proc.pid} exited {code}: {self.log.read_text()[-1500:]}"
        readyz = self.get(self.health_port, "/readyz")
        leading = self.metric(f'leader_election_master_status{{name="{LEASE_NAME}"}}')
        return f"pid {self.proc.pid}: /readyz {readyz}, leader metric {leading}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def log_records(log: Path) -> list[dict[str, Any]]:
    """The JSON records of a process's log so far (lines that are not JSON are skipped)."""
    records = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


def lease_reads(control_plane: ControlPlane, user: str) -> int:
    """How many GETs of the Lease ``user`` has finished, by the audit log."""
    return len(
        {
            e["auditID"]
            for e in control_plane.audit_events(user)
            if e["verb"] == "get"
            and e["stage"] == "ResponseComplete"
            and (e.get("objectRef") or {}).get("resource") == "leases"
            and (e.get("objectRef") or {}).get("name") == LEASE_NAME
        }
    )


@pytest.fixture
def config_file(tmp_path: Path, namespace: str) -> Path:
    path = tmp_path / "config.yaml"
    write_configuration(
        path,
        {
            "leaderElection": {
                "leaderElect": True,
                "resourceNamespace": namespace,
                "leaseDuration": f"{LEASE:g}s",
                "renewDeadline": f"{RENEW:g}s",
                "retryPeriod": f"{RETRY:g}s",
            },
            # Internal certificates (the default): the Secret lives in the Lease's namespace;
            # every process serves the webhooks on its own free port from a certDir here.
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path / "certs")},
        },
    )
    return path


@pytest.fixture
def start(
    control_plane: ControlPlane, config_file: Path, tmp_path: Path, namespace: str
) -> Iterator[Callable[[], Controller]]:
    """Launches `run` processes, each as the next of ``ACCOUNTS``: ServiceAccounts of the test's
    namespace (which also holds the Lease) bound to the shipped roles and nothing else."""
    started: list[Controller] = []
    with shipped_rbac(control_plane, namespace, ACCOUNTS, tmp_path) as kubeconfigs:

        def launch() -> Controller:
            account = ACCOUNTS[len(started)]
            controller = Controller(
                kubeconfigs[account],
                config_file,
                tmp_path / f"{account}.log",
                service_account_user(namespace, account),
            )
            started.append(controller)
            return controller

        try:
            yield launch
        finally:
            for controller in started:
                controller.stop()


def test_probes_and_metrics_answer(start: Callable[[], Controller]) -> None:
    controller = start()
    poll(
        lambda: controller.get(controller.health_port, "/readyz")[0] == 200,
        "ready",
        30,
        state=controller.describe,
        interval=0.1,
    )
    assert controller.get(controller.health_port, "/healthz") == (200, "ok")
    status, body = controller.get(controller.metrics_port, "/metrics")
    assert status == 200
    for name in (
        "controller_runtime_reconcile_total",
        "workqueue_depth",
        "rest_client_requests_total",
        "leader_election_master_status",
        "jobset_event_loop_lag_seconds",
        "jobset_build_info",
    ):
        assert name in body


def test_not_ready_until_caches_sync(
    control_plane: ControlPlane, config_file: Path, tmp_path: Path
) -> None:
    # An identity with no RBAC permissions: the informers' lists are forbidden, so the caches
    # never sync. The process must stay alive (healthz) but not ready (readyz).
    pair = control_plane.ca.issue("nobody", common_name="nobody")
    kubeconfig = yaml.safe_load(control_plane.kubeconfig.read_text())
    kubeconfig["users"][0]["user"] = {
        "client-certificate": str(pair.cert),
        "client-key": str(pair.key),
    }
    restricted = tmp_path / "nobody.kubeconfig"
    restricted.write_text(yaml.safe_dump(kubeconfig))
    controller = Controller(restricted, config_file, tmp_path / "nobody.log")
    try:
        poll(
            lambda: controller.get(controller.health_port, "/healthz")[0] == 200,
            "live",
            30,
            state=controller.describe,
            interval=0.1,
        )

        def list_refused_twice() -> bool:
            # The JobSet informer has listed, been refused, backed off and listed again.
            refusals = [
                r
                for r in log_records(controller.log)
                if r.get("msg") == "list/watch failed" and r.get("resource") == "jobsets"
            ]
            return len(refusals) >= 2

        poll(
            list_refused_twice,
            "two refused lists of JobSets",
            30,
            state=controller.describe,
            interval=0.1,
        )
        status, body = controller.get(controller.health_port, "/readyz")
        assert status == 500
        assert "[-]informer-jobsets failed" in body
        assert controller.proc.poll() is None
    finally:
        controller.stop()


def test_one_leader_and_takeover_after_kill_and_after_sigterm(
    control_plane: ControlPlane,
    start: Callable[[], Controller],
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second = start(), start()
    poll(
        lambda: first.is_leader() or second.is_leader(),
        "a leader",
        30,
        state=lambda: f"first {first.describe()}; second {second.describe()}",
        interval=0.1,
    )
    leader = first if first.is_leader() else second
    standby = second if leader is first else first
    # The standby has read the Lease three more times since (the audit log counts its reads)
    # and still does not lead.
    reads = lease_reads(control_plane, standby.user)
    poll(
        lambda: lease_reads(control_plane, standby.user) >= reads + 3,
        "standby retries",
        30,
        state=lambda: (
            f"{lease_reads(control_plane, standby.user) - reads} reads since; " + standby.describe()
        ),
        interval=0.1,
    )
    leaders = [c for c in (first, second) if c.is_leader()]
    assert leaders == [leader]
    assert standby.metric(f'leader_election_master_status{{name="{LEASE_NAME}"}}') == 0.0

    os.kill(leader.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    poll(
        standby.is_leader,
        "takeover after kill",
        TAKEOVER_WAIT,
        state=standby.describe,
        interval=0.1,
    )
    took_after_kill = time.monotonic() - killed

    third = start()
    poll(
        lambda: third.get(third.health_port, "/readyz")[0] == 200,
        "third ready",
        30,
        state=third.describe,
        interval=0.1,
    )
    standby.proc.send_signal(signal.SIGTERM)
    assert standby.proc.wait(timeout=scaled(30)) == 0, standby.log.read_text()[-3000:]
    termed = time.monotonic()
    poll(
        third.is_leader, "takeover after SIGTERM", TAKEOVER_WAIT, state=third.describe, interval=0.1
    )
    took_after_term = time.monotonic() - termed
    with capsys.disabled():
        print(
            f"\n  lease {LEASE:g}s/{RENEW:g}s/{RETRY:g}s: takeover after kill -9 "
            f"{took_after_kill:.1f} s, after SIGTERM (lease released) {took_after_term:.1f} s"
        )
    assert took_after_kill <= scaled(TAKEOVER_AFTER_KILL)
    assert took_after_term <= scaled(TAKEOVER_AFTER_RELEASE)


def _jobset(name: str) -> dict[str, Any]:
    workers = replicated_job("workers", 2, backoff_limit=0)
    return jobset_manifest(name, replicated_jobs=[workers])


def _admin(plane: ControlPlane, namespace: str, act: Callable[[KubeSim], Awaitable[Any]]) -> Any:
    """Run ``act`` with a KubeSim on an admin client (this test plays the Job controller)."""

    async def run() -> Any:
        kube = await KubeClient.connect(kubeconfig=str(plane.kubeconfig))
        try:
            return await act(KubeSim(kube, namespace))
        finally:
            await kube.close()

    return asyncio.run(run())


def _timestamp(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value)


def _is_lease(event: dict[str, Any]) -> bool:
    ref = event.get("objectRef") or {}
    return ref.get("apiGroup") == "coordination.k8s.io" and ref.get("resource") == "leases"


def _writes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One event per write request (a request's last recorded stage)."""
    last: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["verb"] in WRITES:
            last[event["auditID"]] = event
    return sorted(last.values(), key=lambda e: e["requestReceivedTimestamp"])


def _describe(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    what = "/".join(
        part
        for part in (
            ref.get("resource"),
            ref.get("namespace"),
            ref.get("name"),
            ref.get("subresource"),
        )
        if part
    )
    code = (event.get("responseStatus") or {}).get("code")
    return f"{event['requestReceivedTimestamp']} {event['verb']} {what} -> {code}"


def test_the_standby_writes_nothing_before_it_holds_the_lease(
    control_plane: ControlPlane,
    start: Callable[[], Controller],
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A leads; B, another ServiceAccount, stands by with synced caches.
    a = start()
    poll(a.is_leader, "A leading", 60, state=a.describe, interval=0.1)
    b = start()
    poll(
        lambda: b.get(b.health_port, "/readyz")[0] == 200,
        "B ready (caches synced)",
        60,
        state=b.describe,
        interval=0.1,
    )
    assert not b.is_leader()

    def jobs_of(jobset: str) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = _admin(control_plane, namespace, lambda sim: sim.jobs())
        return [j for j in jobs if j["metadata"]["labels"].get(JOBSET_NAME) == jobset]

    def create(name: str) -> None:
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
        status, reply = control_plane.request("POST", path, _jobset(name))
        assert status == 201, reply

    # Work both see, which only A may act on: B's caches now hold these JobSets and their Jobs.
    for name in ("seen-1", "seen-2", "seen-3"):
        create(name)

    def has_jobs(name: str) -> Callable[[], bool]:
        return lambda: len(jobs_of(name)) == 2

    def jobs_seen(name: str, controller: Controller) -> Callable[[], str]:
        return lambda: (
            f"Jobs {[j['metadata']['name'] for j in jobs_of(name)]}; " + (controller.describe())
        )

    for name in ("seen-1", "seen-2", "seen-3"):
        poll(
            has_jobs(name),
            f"A creating the Jobs of {name}",
            60,
            state=jobs_seen(name, a),
            interval=0.1,
        )

    killed_at = datetime.datetime.now(datetime.UTC)
    os.kill(a.proc.pid, signal.SIGKILL)
    started = time.monotonic()
    # While nobody leads (the Lease runs out only after LEASE s): new work lands in B's caches.
    done = [job["metadata"]["name"] for job in jobs_of("seen-1")]

    async def complete(sim: KubeSim) -> None:
        for job in done:
            await sim.complete(job)

    _admin(control_plane, namespace, complete)
    create("orphan-1")
    create("orphan-2")
    queued_while_standby = not b.is_leader()

    poll(b.is_leader, "takeover after kill", TAKEOVER_WAIT, state=b.describe, interval=0.1)
    took = time.monotonic() - started  # from the kill, the writes above included

    # B reconciles what A left: Jobs for the new JobSets, the completed JobSet's status.
    def completed(name: str) -> bool:
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"
        status, js = control_plane.request("GET", path)
        assert status == 200, js
        return (js.get("status") or {}).get("terminalState") == "Completed"

    for name in ("orphan-1", "orphan-2"):
        poll(
            has_jobs(name),
            f"B creating the Jobs of {name}",
            60,
            state=jobs_seen(name, b),
            interval=0.1,
        )
    poll(
        lambda: completed("seen-1"),
        "B marking seen-1 completed",
        60,
        state=b.describe,
        interval=0.1,
    )

    events = control_plane.audit_events(b.user)
    acquisitions = [
        e
        for e in events
        if _is_lease(e)
        and e["stage"] == "ResponseComplete"
        and e["verb"] in ("create", "update")
        and 200 <= (e.get("responseStatus") or {}).get("code", 0) < 300
    ]
    assert acquisitions, "no successful Lease write by B in the audit log"
    acquired = min(acquisitions, key=lambda e: e["requestReceivedTimestamp"])
    # B holds the Lease once the API server has committed its write (the stage's timestamp):
    # stricter than the request's arrival, and no write of B's may come in before it.
    held_from = _timestamp(acquired["stageTimestamp"])
    writes = [e for e in _writes(events) if not _is_lease(e)]
    early = [_describe(e) for e in writes if _timestamp(e["requestReceivedTimestamp"]) < held_from]
    assert early == [], f"B wrote before it held the Lease ({_describe(acquired)}): {early}"
    after = {(e["verb"], (e.get("objectRef") or {}).get("resource")) for e in writes}
    assert ("create", "jobs") in after, f"B's writes after takeover: {sorted(after)}"
    refused = [
        _describe(e)
        for user in (a.user, b.user)
        for e in control_plane.audit_events(user)
        if (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
    ]
    assert refused == [], f"requests the shipped roles refused: {refused}"

    audit_takeover = (_timestamp(acquired["stageTimestamp"]) - killed_at).total_seconds()
    with capsys.disabled():
        print(
            f"\n  lease {LEASE:g}s/{RENEW:g}s/{RETRY:g}s: standby took over {took:.1f} s after "
            f"kill -9 (Lease write answered {audit_takeover:.1f} s after it, per the audit log); "
            f"{len(writes)} writes, all after; work queued while standing by: "
            f"{queued_while_standby}"
        )
    assert took <= scaled(TAKEOVER_AFTER_KILL)


def test_bad_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("leaderElection:\n  leaseDuraton: 15s\n")
    result = subprocess.run(
        [sys.executable, "-m", "jobset_controller", "run", f"--config={bad}"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"jobset-controller: --config {bad}: leaderElection.leaseDuraton: unknown field"
    )
