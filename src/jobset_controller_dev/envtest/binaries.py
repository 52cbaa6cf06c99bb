"""Where the Kubernetes binaries come from.

There is no download site for release binaries on the machines this project targets, so the
binaries are compiled once from their Go modules by `hack/k8s-binaries.sh` and cached outside the
repository, keyed by version. This module only finds them, or asks that script to build them. The
versions here are the contract with the script (a unit test checks that both agree).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

K8S_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.0"
KWOK_VERSION = "v0.7.0"
HELM_VERSION = "v3.19.0"
COREDNS_VERSION = "v1.14.7"
CONTAINERD_VERSION = "v2.4.2"

INTEGRATION_COMPONENTS = ("etcd", "kube-apiserver", "kubectl")
FULL_COMPONENTS = (*INTEGRATION_COMPONENTS, "kube-controller-manager", "kube-scheduler", "kwok")
# The real-node tier: the full cluster's control plane, a real kubelet and kube-proxy, CoreDNS,
# and containerd (with its runc shim and ctr).
NODE_COMPONENTS = (*FULL_COMPONENTS, "kubelet", "kube-proxy", "coredns", "helm", "containerd")


def kube_version(bin_dir: Path) -> tuple[int, ...]:
    """The version kube-apiserver in ``bin_dir`` reports, e.g. (1, 37, 2)."""
    reply = subprocess.run(
        [str(bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True, check=True
    )
    numbers = reply.stdout.split()[-1].lstrip("v").split("-")[0]
    return tuple(int(part) for part in numbers.split("."))


class BinariesMissing(RuntimeError):
    """The binaries are not cached and cannot be built from here."""


def cache_root() -> Path:
    explicit = os.environ.get("JOBSET_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "jobset-controller"


def cached_bin_dir() -> Path:
    return cache_root() / f"k8s-{K8S_VERSION}" / "bin"


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any (it holds hack/ and manifests/)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "hack" / "k8s-binaries.sh").is_file() and (parent / "pyproject.toml").exists():
            return parent
    return None


def _complete(directory: Path, components: tuple[str, ...]) -> bool:
    names = list(components) + (["etcdctl"] if "etcd" in components else [])
    if "containerd" in components:
        names += ["containerd-shim-runc-v2", "ctr"]
    return all(os.access(directory / n, os.X_OK) for n in names)


def ensure_binaries(components: tuple[str, ...] = INTEGRATION_COMPONENTS) -> Path:
    """Return a directory holding every requested binary, building missing ones once.

    Order of preference: JOBSET_K8S_BIN, KUBEBUILDER_ASSETS (controller-runtime's envtest layout),
    the version-keyed cache, then a build by hack/k8s-binaries.sh (minutes, printed as it goes).
    """
    for var in ("JOBSET_K8S_BIN", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(var)
        if value and _complete(Path(value), components):
            return Path(value)
    cached = cached_bin_dir()
    if _complete(cached, components):
        return cached
    root = repo_root()
    if root is None:
        raise BinariesMissing(
            f"Kubernetes binaries {', '.join(components)} not found in {cached}; set "
            "JOBSET_K8S_BIN (or KUBEBUILDER_ASSETS) to a directory holding them, or run "
            "hack/k8s-binaries.sh from a source checkout to build them."
        )
    env = dict(
        os.environ,
        K8S_VERSION=K8S_VERSION,
        ETCD_VERSION=ETCD_VERSION,
        KWOK_VERSION=KWOK_VERSION,
        HELM_VERSION=HELM_VERSION,
        COREDNS_VERSION=COREDNS_VERSION,
        CONTAINERD_VERSION=CONTAINERD_VERSION,
    )
    result = subprocess.run(
        [str(root / "hack" / "k8s-binaries.sh"), *components],
        env=env,
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BinariesMissing(f"hack/k8s-binaries.sh failed with exit code {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])
