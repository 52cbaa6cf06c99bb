"""Upstream's JobSet controller (sigs.k8s.io/jobset, Go), found or built for the tests.

This project promises to be a drop-in replacement for upstream's controller, so upstream itself
is part of the test suite: the other side of an upgrade and a rollback (images and Helm charts),
an oracle for behaviour, and the reference of the benchmarks. `hack/upstream-jobset.sh` builds it
once from the Go module proxy (exact version only: the proxy refuses the module's version list)
and keeps, beside the binary, what the same module download ships:

    <cache>/upstream-jobset-<version>/bin/jobset-manager   the controller (its root `main`)
    <cache>/upstream-jobset-<version>/crd/                 its CRD
    <cache>/upstream-jobset-<version>/webhook/             webhook configurations and Service
    <cache>/upstream-jobset-<version>/rbac/                its RBAC (incl. the editor/viewer roles)
    <cache>/upstream-jobset-<version>/manager/             its Deployment and default Configuration
    <cache>/upstream-jobset-<version>/charts/jobset/       its Helm chart

`ensure_upstream()` returns the bin directory; the helpers below name the rest, and
`UpstreamController` runs the manager as a host process on loopback ports (as the tests run ours).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from jobset_controller_dev.envtest.binaries import cache_root, repo_root
from jobset_controller_dev.envtest.processes import (
    ManagedProcess,
    free_port,
    health_status,
    wait_healthy,
)

UPSTREAM_VERSION = "v0.12.0"
MANAGER = "jobset-manager"


class UpstreamMissing(RuntimeError):
    """Upstream's controller is not cached and cannot be built from here."""


def upstream_home(bin_dir: Path) -> Path:
    """The version directory holding bin/, crd/, webhook/, rbac/, manager/ and charts/."""
    return bin_dir.parent


def upstream_manager(bin_dir: Path) -> Path:
    """The controller binary."""
    return bin_dir / MANAGER


def upstream_chart(bin_dir: Path) -> Path:
    """Upstream's Helm chart directory (charts/jobset of the module)."""
    return upstream_home(bin_dir) / "charts" / "jobset"


def upstream_rbac(bin_dir: Path) -> list[dict[str, Any]]:
    """Upstream's roles and their bindings as its kustomize manifests ship them (the manager's
    ClusterRole, leader election, metrics authentication, secrets), for `identities.shipped_rbac`:
    upstream run under our roles would be refused what it does differently (it updates Jobs on
    resume, writes core/v1 Events for its Lease)."""
    skip = {"kustomization.yaml", "service_account.yaml", "jobset_editor_role.yaml",
            "jobset_viewer_role.yaml"}  # fmt: skip
    documents = []
    for path in sorted((upstream_home(bin_dir) / "rbac").glob("*.yaml")):
        if path.name not in skip:
            documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def upstream_crds(bin_dir: Path) -> list[Path]:
    """Upstream's CRD files."""
    return sorted((upstream_home(bin_dir) / "crd").glob("*.yaml"))


def _complete(bin_dir: Path) -> bool:
    home = upstream_home(bin_dir)
    return (
        os.access(upstream_manager(bin_dir), os.X_OK)
        and (home / "crd").is_dir()
        and (home / "webhook" / "manifests.yaml").is_file()
        and (home / "rbac").is_dir()
        and (upstream_chart(bin_dir) / "Chart.yaml").is_file()
    )


def ensure_upstream() -> Path:
    """Return upstream's bin directory, building it once (minutes) with the script if needed.

    Order: JOBSET_UPSTREAM_BIN, the version-keyed cache, then hack/upstream-jobset.sh (which
    prints progress on stderr and the bin directory last on stdout).
    """
    explicit = os.environ.get("JOBSET_UPSTREAM_BIN")
    if explicit and _complete(Path(explicit)):
        return Path(explicit)
    cached = cache_root() / f"upstream-jobset-{UPSTREAM_VERSION}" / "bin"
    if _complete(cached):
        return cached
    root = repo_root()
    if root is None:
        raise UpstreamMissing(
            f"upstream JobSet {UPSTREAM_VERSION} not found in {cached}; set JOBSET_UPSTREAM_BIN "
            "or run hack/upstream-jobset.sh from a source checkout."
        )
    result = subprocess.run(
        [str(root / "hack" / "upstream-jobset.sh")],
        env=dict(os.environ, UPSTREAM_JOBSET_VERSION=UPSTREAM_VERSION),
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise UpstreamMissing(f"hack/upstream-jobset.sh failed with exit code {result.returncode}")
    bin_dir = Path(result.stdout.strip().splitlines()[-1])
    if not _complete(bin_dir):
        raise UpstreamMissing(f"hack/upstream-jobset.sh printed {bin_dir}, which is incomplete")
    return bin_dir


class UpstreamController:
    """Upstream's manager as a host process: `--kubeconfig`, `--config`, metrics and health probes
    on 127.0.0.1 ports, then `args` (Go flags, e.g. `--leader-elect=false`). Its webhook server
    listens where the Configuration's `webhook.host`/`port` say (put 127.0.0.1 there: upstream
    binds every interface by default) with the pair in `webhook.certDir`. Keep
    `internalCertManagement.enable: false`: upstream's rotator writes to the fixed host path
    /tmp/k8s-webhook-server/serving-certs. Started on construction; output goes to `log`."""

    def __init__(
        self,
        bin_dir: Path,
        *,
        kubeconfig: Path,
        config: Path,
        log: Path,
        metrics_port: int | None = None,
        health_port: int | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.health_port = health_port if health_port is not None else free_port()
        self.metrics_port = metrics_port if metrics_port is not None else free_port()
        self.process = ManagedProcess(
            "upstream-jobset",
            [
                str(upstream_manager(bin_dir)),
                f"--kubeconfig={kubeconfig}",
                f"--config={config}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                *args,
            ],
            log,
        )
        self.process.start()

    def probe(self, path: str) -> int:
        """The HTTP status of `path` on the health port; 0 when nothing answers."""
        return health_status(self.health_port, path)

    def wait_ready(self, within: float = 60) -> None:
        """Until /readyz answers 200 (upstream: certificates ready and the webhook server
        started); fail if the process exits first or `within` s pass (scaled once, by
        `wait_healthy`)."""
        wait_healthy(
            self.health_port,
            running=self.process.running,
            exited=lambda: UpstreamMissing(f"upstream exited:\n{self.process.log_tail()}"),
            late=lambda seen: TimeoutError(
                f"upstream not ready: {seen}:\n{self.process.log_tail()}"
            ),
            within=within,
        )

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (as a rollout does), then SIGKILL after `timeout` s (scaled once, by
        `ManagedProcess.stop`)."""
        self.process.stop(timeout)
