"""`ControllerProcess`: the real controller (`python -m jobset_controller run`) as a child process
on 127.0.0.1 ports, for tests and benches that exercise the shipped command."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from jobset_controller_dev.envtest.controlplane import ControlPlane
from jobset_controller_dev.envtest.pki import CertificateAuthority
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port, health_status, wait_healthy

CONFIG_API_VERSION: Final = "config.jobset.x-k8s.io/v1alpha1"


class ControllerProcess:
    """Spawned on construction: ``--kubeconfig``, ``--config``, metrics and health probes on
    127.0.0.1 (``metrics`` is the ``--metrics-bind-address`` value: "0" turns it off, None picks
    a free port), then ``args``. stderr goes to ``log``; stdout is discarded."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        config: Path,
        log: Path,
        args: Sequence[str] = (),
        metrics: str | None = None,
        health_port: int | None = None,
    ) -> None:
        self.log = log
        self.health_port = health_port if health_port is not None else free_port()
        self.webhook_port = 0  # set by start_local_controller, which picks it
        metrics_address = metrics if metrics is not None else f"127.0.0.1:{free_port()}"
        with log.open("w") as stderr:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                [
                    sys.executable, "-m", "jobset_controller", "run",
                    f"--kubeconfig={kubeconfig}", f"--config={config}",
                    f"--metrics-bind-address={metrics_address}",
                    f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                    *args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )  # fmt: skip

    def probe(self, path: str) -> int:
        """The HTTP status of ``path`` on the health port; 0 when nothing answers."""
        return health_status(self.health_port, path)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text()[-chars:]

    def wait_ready(self, within: float = 60, interval: float = 0.1) -> None:
        """Block until /readyz answers 200; fail if the process exits or ``within`` s pass
        (scaled once, by `wait_healthy`)."""
        wait_healthy(
            self.health_port,
            running=lambda: self.proc.poll() is None,
            exited=lambda: AssertionError(f"controller exited {self.proc.poll()}: {self.tail()}"),
            late=lambda seen: AssertionError(f"controller not ready: {seen}: {self.tail()}"),
            within=within,
            interval=interval,
        )

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, wait up to ``timeout`` s (scaled: `polling.scaled`, as callers assert a clean
        exit, which a busy machine reaches later), then SIGKILL; return the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def write_configuration(path: Path, sections: Mapping[str, Any]) -> Path:
    """Write the controller's Configuration file (``config.jobset.x-k8s.io/v1alpha1``) holding
    ``sections`` (``leaderElection``, ``webhook``, ...) and return its path."""
    document = {"apiVersion": CONFIG_API_VERSION, "kind": "Configuration", **sections}
    path.write_text(yaml.safe_dump(document))
    return path


def start_local_controller(
    *,
    workdir: Path,
    ca: CertificateAuthority,
    kubeconfig: Path,
    stem: str,
    sections: Mapping[str, Any] | None = None,
    args: Sequence[str] = ("--leader-elect=false",),
    within: float = 60,
) -> ControllerProcess:
    """Our controller with its webhook server on a free 127.0.0.1 port, serving a pair that
    ``ca`` (the cluster's) issued into ``workdir/<stem>-certs`` (internal certificate management
    off), and the Configuration's other ``sections`` (e.g. ``featureGates``); returned once
    /readyz answers 200 within ``within`` s (scaled, by `ControllerProcess.wait_ready`; its
    ``webhook_port`` says where the webhooks are served). Files are named after ``stem``, so
    several can share a workdir.

    Why one helper: every test or bench that registers webhooks by URL on loopback needs this
    same pair, Configuration and wait, and they drifted apart when each spelled it out."""
    cert_dir = workdir / f"{stem}-certs"
    ca.write_pair(cert_dir, stem, common_name="webhook", ip_addresses=("127.0.0.1",), server=True)
    webhook_port = free_port()
    config = write_configuration(
        workdir / f"{stem}-config.yaml",
        {
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "internalCertManagement": {"enable": False},
            **(sections or {}),
        },
    )
    process = ControllerProcess(
        kubeconfig=kubeconfig, config=config, log=workdir / f"{stem}-controller.log", args=args
    )
    process.webhook_port = webhook_port
    process.wait_ready(within, interval=0.2)
    return process


@contextlib.contextmanager
def local_controller(
    cluster: ControlPlane,
    *,
    stem: str,
    sections: Mapping[str, Any] | None = None,
    args: Sequence[str] = ("--leader-elect=false",),
    within: float = 60,
    stop_within: float = 60,
) -> Iterator[ControllerProcess]:
    """``start_local_controller`` against ``cluster`` (its workdir, CA and kubeconfig) for a
    ``with`` block, e.g. a fixture's body: on leaving the block the controller is stopped
    (SIGTERM, SIGKILL after ``stop_within`` s) and its exit code asserted to be 0, since a clean
    shutdown is part of what the tests check. Both bounds are scaled once, by the process's
    `wait_ready` and `stop`."""
    process = start_local_controller(
        workdir=cluster.workdir,
        ca=cluster.ca,
        kubeconfig=cluster.kubeconfig,
        stem=stem,
        sections=sections,
        args=args,
        within=within,
    )
    try:
        yield process
    finally:
        assert process.stop(stop_within) == 0, process.tail()
