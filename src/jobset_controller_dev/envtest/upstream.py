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

`ensure_upstream()` returns the bin directory; the helpers below name the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobset_controller_dev.envtest.binaries import cache_root, repo_root

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
