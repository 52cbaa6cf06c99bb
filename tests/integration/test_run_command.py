"""`jobset-controller run` as users run it: leader election between processes, probes, metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.processes import free_port

LEASE_NAME = "6d4f6a47.jobset.x-k8s.io"
LEASE, RENEW, RETRY = 6.0, 5.0, 1.0


class Controller:
    """One `jobset-controller run` process with its own metrics and probe ports."""

    def __init__(self, kubeconfig: Path, config: Path, log: Path) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobset_controller",
                "run",
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--leader-elect",
                "--log-format=json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )

    def get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
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

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(check: Callable[[], bool], within: float, what: str) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what} not reached within {within} s")
        time.sleep(0.1)
    return time.monotonic() - started


@pytest.fixture
def config_file(tmp_path: Path, namespace: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {
                    "leaderElect": True,
                    "resourceNamespace": namespace,
                    "leaseDuration": f"{LEASE:g}s",
                    "renewDeadline": f"{RENEW:g}s",
                    "retryPeriod": f"{RETRY:g}s",
                },
            }
        )
    )
    return path


@pytest.fixture
def start(
    control_plane: ControlPlane, config_file: Path, tmp_path: Path
) -> Iterator[Callable[[], Controller]]:
    started: list[Controller] = []

    def launch() -> Controller:
        controller = Controller(
            control_plane.kubeconfig, config_file, tmp_path / f"controller-{len(started)}.log"
        )
        started.append(controller)
        return controller

    yield launch
    for controller in started:
        controller.stop()


def test_probes_and_metrics_answer(start: Callable[[], Controller]) -> None:
    controller = start()
    wait_for(lambda: controller.get(controller.health_port, "/readyz")[0] == 200, 30, "ready")
    assert controller.get(controller.health_port, "/healthz") == (200, "ok")
    status, body = controller.get(controller.metrics_port, "/metrics")
    assert status == 200
    for name in (
        "controller_runtime_reconcile_total",
        "workqueue_depth",
        "rest_client_requests_total",
        "leader_election_master_status",
        "jobset_event_loop_lag_seconds",
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
        wait_for(lambda: controller.get(controller.health_port, "/healthz")[0] == 200, 30, "live")
        time.sleep(1.0)
        status, body = controller.get(controller.health_port, "/readyz")
        assert status == 500
        assert "informers" in body
        assert controller.proc.poll() is None
    finally:
        controller.stop()


def test_one_leader_and_takeover_after_kill_and_after_sigterm(
    start: Callable[[], Controller], capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = start(), start()
    wait_for(lambda: first.is_leader() or second.is_leader(), 30, "a leader")
    time.sleep(RETRY * 3)
    leaders = [c for c in (first, second) if c.is_leader()]
    assert len(leaders) == 1
    leader = leaders[0]
    standby = second if leader is first else first
    assert standby.metric(f'leader_election_master_status{{name="{LEASE_NAME}"}}') == 0.0

    os.kill(leader.proc.pid, signal.SIGKILL)
    took_after_kill = wait_for(standby.is_leader, LEASE + RETRY * 2.2 + 3, "takeover after kill")

    third = start()
    wait_for(lambda: third.get(third.health_port, "/readyz")[0] == 200, 30, "third ready")
    standby.proc.send_signal(signal.SIGTERM)
    assert standby.proc.wait(timeout=30) == 0, standby.log.read_text()[-3000:]
    took_after_term = wait_for(third.is_leader, RETRY * 2.2 + 3, "takeover after SIGTERM")
    with capsys.disabled():
        print(
            f"\n  lease {LEASE:g}s/{RENEW:g}s/{RETRY:g}s: takeover after kill -9 "
            f"{took_after_kill:.1f} s, after SIGTERM (lease released) {took_after_term:.1f} s"
        )


def test_bad_config_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("leaderElection:\n  leaseDuraton: 15s\n")
    result = subprocess.run(
        [sys.executable, "-m", "jobset_controller", "run", f"--config={bad}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"jobset-controller: --config {bad}: leaderElection.leaseDuraton: unknown field"
    )
