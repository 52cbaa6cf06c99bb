"""Upstream's controller (sigs.k8s.io/jobset v0.12.0, hack/upstream-jobset.sh) as a benchmark
subject, read from outside exactly like ours (`benchlib.Controller`): CPU from /proc, RSS, its
request and reconcile counters from /metrics.

Why a subclass: the scenarios in cpu_bench.py then run unchanged against both controllers in one
run, on one control plane, so every ratio compares the same work under the same load.

What differs, and why it is fair:
- Upstream serves /metrics only over HTTPS behind TokenReview + SubjectAccessReview
  (controller-runtime's filter); the bench scrapes with a ServiceAccount token bound to
  cluster-admin. Scrapes happen outside every CPU window (as for ours).
- Upstream's webhook server must start before /readyz answers, so it gets a serving pair issued by
  the control plane's CA in its `certDir`, and `internalCertManagement` off (its rotator writes to
  a fixed host path). Ours starts its webhook server too (internal certificate management, as in
  cpu_bench). Neither has webhook configurations registered: no admission traffic in either run.
- Both run with leader election off and the same client budget (QPS 500, burst 500: both
  defaults). Upstream logs in its default development console format at info level, ours JSON at
  info level.
- Upstream has no event-loop lag histogram: its lag figures are absent, not zero.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from benchlib import Controller, parse_metrics

from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.identities import metrics_scraper_token
from jobset_controller_dev.envtest.upstream import upstream_manager

SCRAPER_NAMESPACE = "bench-scraper"


def scraper_token(plane: ControlPlane, workdir: Path) -> str:
    """A token of a ServiceAccount bound to cluster-admin: what upstream's /metrics filter
    accepts (`identities.metrics_scraper_token`, the benches' account)."""
    return metrics_scraper_token(plane, workdir, SCRAPER_NAMESPACE)


class UpstreamController(Controller):
    """Upstream's `jobset-manager` binary as a child process; `src` is its bin directory."""

    def __init__(
        self,
        *args: Any,
        token: str,
        feature_gates: Mapping[str, bool] | None = None,
        **kwargs: Any,
    ) -> None:
        """`webhook_certs` (a keyword of `Controller`): the pair its webhook server serves;
        by default one issued here by the control plane's CA. `feature_gates`: its
        Configuration's featureGates (upstream reads gates from the file only)."""
        super().__init__(*args, **kwargs)
        self.token = token
        self.feature_gates = dict(feature_gates or {})

    async def start(self, limit: float = 300.0) -> float:
        """Start; returns the seconds from spawning the process to /readyz answering 200."""
        stem = f"upstream-{time.monotonic_ns()}"
        cert_dir = self.webhook_certs
        if cert_dir is None:
            cert_dir = self.log_path.parent / f"{stem}-certs"
            cert_dir.mkdir()
            self.plane.ca.write_pair(
                cert_dir, stem, common_name="upstream-webhook", ip_addresses=("127.0.0.1",),
                server=True,
            )  # fmt: skip
        config = self.log_path.with_suffix(".config.yaml")
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "internalCertManagement": {"enable": False},
                    "webhook": {
                        "host": "127.0.0.1",
                        "port": self.webhook_port,
                        "certDir": str(cert_dir),
                    },
                    "leaderElection": {"leaderElect": False},
                    "clientConnection": {"qps": 500, "burst": 500},
                    **({"featureGates": self.feature_gates} if self.feature_gates else {}),
                }
            )
        )
        args = [
            str(upstream_manager(self.src)),
            f"--kubeconfig={self.plane.kubeconfig}",
            f"--config={config}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            "--leader-elect=false",
            "--zap-log-level=info",
            *self.extra_args,
        ]
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, cwd="/")  # noqa: ASYNC220
        self.pid = self.proc.pid
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"upstream exited: {self.log_path.read_text()[-3000:]}")
            try:
                async with self._http.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                    if r.status == 200:
                        return time.perf_counter() - started
            except (aiohttp.ClientError, TimeoutError):
                pass
            if time.perf_counter() - started > limit:
                raise TimeoutError("upstream not ready")
            await asyncio.sleep(0.005)

    async def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        assert self._http is not None
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its self-signed metrics certificate, on loopback
        async with self._http.get(
            f"https://127.0.0.1:{self.metrics_port}/metrics",
            headers={"Authorization": f"Bearer {self.token}"},
            ssl=insecure,
        ) as r:
            if r.status != 200:
                raise RuntimeError(f"upstream /metrics answered {r.status}")
            return parse_metrics(await r.text())

    async def lag_buckets(self) -> dict[float, float]:
        """Upstream has no event-loop lag histogram."""
        return {}

    def blocked_warnings(self) -> list[float]:
        return []
