"""The controller under soak as a Deployment runs it: two replicas, leader-elected, each restarted
when it dies, with its CPU and memory read from /proc over every life.

Why both controllers through one class: the soak's figures compare ours with upstream v0.12.0 under
the same seed, so both start from the same Configuration (leader election on a Lease in
`jobset-system`, the webhook on a loopback port serving one shared pair, internal certificate
management off, secure metrics), run as the same ServiceAccount bound to the shipped roles, and are
killed and restarted by the same code. Only the command line and the log line that says "I lead"
differ.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from jobset_controller_dev.envtest.controller import write_configuration
from jobset_controller_dev.envtest.processes import (
    free_port,
    parent_death_signal,
    process_cpu,
    process_rss,
    wait_healthy,
)
from jobset_controller_dev.envtest.upstream import upstream_manager

LEASE_NAMESPACE: Final = "jobset-system"
OURS: Final = "ours"
UPSTREAM: Final = "upstream"
# What each controller logs once it holds the Lease (ours: runtime/leaderelection.py; upstream:
# client-go's leaderelection package).
LEADER_MARKS: Final = {OURS: '"became leader"', UPSTREAM: "Successfully acquired lease"}
# What each logs once it has lost the Lease (ours: manager/lifecycle.py; upstream: its manager's
# error). Ours then runs on for up to 45 s to write its recorded Events and exits 1.
LOST_MARKS: Final = {OURS: '"leader election lost, exiting"', UPSTREAM: "leader election lost"}


@dataclass
class Replica:
    """One replica: `start` spawns a life, `signal` ends it, `start` again begins the next."""

    kind: str
    index: int
    kubeconfig: Path
    workdir: Path
    cert_dir: Path
    upstream_bin: Path | None = None
    webhook_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    lives: int = 0
    logs: list[Path] = field(default_factory=list)
    cpu_of_ended_lives: float = 0.0
    started_at: float = 0.0
    last_exit: int | None = None
    _led_life: int = -1
    _lost_life: int = -1
    _scanned_life: int = -1
    _scanned: int = 0  # bytes of this life's log read for the marks
    _last_cpu: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index}"

    def _config(self) -> Path:
        return write_configuration(
            self.workdir / f"{self.name}-config.yaml",
            {
                "leaderElection": {"leaderElect": True, "resourceNamespace": LEASE_NAMESPACE},
                "webhook": {
                    "host": "127.0.0.1",
                    "port": self.webhook_port,
                    "certDir": str(self.cert_dir),
                },
                "internalCertManagement": {"enable": False},
            },
        )

    def _argv(self) -> list[str]:
        common = [
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self._config()}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            "--leader-elect=true",
            "--zap-log-level=info",
        ]
        if self.kind == OURS:
            return [sys.executable, "-m", "jobset_controller", "run", *common, "--log-format=json"]
        assert self.upstream_bin is not None
        return [str(upstream_manager(self.upstream_bin)), *common]

    def start(self) -> None:
        """`spawn`, then `wait_ready`."""
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the next life. Call it from the main thread: the process gets the parent-death
        signal, which the kernel sends when the thread that started it ends, so a soak that is
        killed leaves no replica behind (and one started from a worker thread would die with
        that thread)."""
        assert self.proc is None or self.proc.poll() is not None
        log = self.workdir / f"{self.name}-life{self.lives}.log"
        self.logs.append(log)
        self.lives += 1
        env = {**os.environ, "POD_NAMESPACE": LEASE_NAMESPACE}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                self._argv(),
                stdout=out,
                stderr=out,
                cwd="/",
                env=env,
                preexec_fn=parent_death_signal(),
            )
        self.started_at = time.monotonic()
        self._last_cpu = 0.0

    def wait_ready(self) -> None:
        """Until /readyz answers 200 (a standby answers too); any thread."""
        assert self.proc is not None
        proc, log = self.proc, self.logs[-1]
        wait_healthy(
            self.health_port,
            running=lambda: proc.poll() is None,
            exited=lambda: RuntimeError(f"{self.name} exited: {log.read_text()[-2000:]}"),
            late=lambda seen: RuntimeError(f"{self.name} not ready: {seen}"),
            within=120,
            interval=0.2,
        )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def leads(self) -> bool:
        """This life holds the Lease: it logged so, has not logged losing it, and still runs.
        A deposed replica of ours runs on for up to 45 s to write its Events, then exits 1: it
        is no leader then, and a SIGTERM it gets is not a SIGTERM to the leader (the hunt of
        2026-11-29 counted its exit 1 as an unclean one)."""
        if not self.alive:
            return False
        self._scan_log()
        return self._led_life == self.lives and self._lost_life != self.lives

    def _scan_log(self) -> None:
        """Read the whole lines this life logged since the last call, for the two marks."""
        if self._scanned_life != self.lives:
            self._scanned_life, self._scanned = self.lives, 0
        try:
            with self.logs[-1].open("rb") as log:
                log.seek(self._scanned)
                chunk = log.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self._scanned += end
        text = chunk[:end].decode(errors="replace")
        if LEADER_MARKS[self.kind] in text:
            self._led_life = self.lives
        if LOST_MARKS[self.kind] in text:
            self._lost_life = self.lives

    def sample(self) -> tuple[float, int]:
        """(CPU seconds over every life so far, RSS bytes of this life now)."""
        if self.alive and self.proc is not None:
            with contextlib.suppress(OSError):  # it ended between the check and the read
                self._last_cpu = process_cpu(self.proc.pid)
                return self.cpu_of_ended_lives + self._last_cpu, process_rss(self.proc.pid)
        return self.cpu_of_ended_lives + self._last_cpu, 0

    def record_exit(self) -> None:
        """Book a life that ended by itself: its exit code and the CPU last sampled."""
        assert self.proc is not None
        self.last_exit = self.proc.wait()
        self.cpu_of_ended_lives += self._last_cpu
        self._last_cpu = 0.0

    def end(self, sig: signal.Signals, within: float = 60.0) -> int:
        """Send `sig`, wait for the exit (SIGKILL after `within` s); return the exit code."""
        assert self.proc is not None
        self.sample()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.cpu_of_ended_lives += self._last_cpu
        self._last_cpu = 0.0
        return code
