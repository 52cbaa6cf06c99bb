"""The Python side and hack/k8s-binaries.sh agree on versions and on where binaries live."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobset_controller_dev.envtest import binaries
from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "k8s-binaries.sh"


@pytest.mark.parametrize(
    "name",
    [
        "K8S_VERSION",
        "ETCD_VERSION",
        "KWOK_VERSION",
        "HELM_VERSION",
        "COREDNS_VERSION",
        "CONTAINERD_VERSION",
    ],
)
def test_script_defaults_match_python_versions(name: str) -> None:
    match = re.search(rf'^{name}="\$\{{{name}:-([^}}]+)\}}"', SCRIPT.read_text(), re.MULTILINE)
    assert match is not None, f"{name} default not found in {SCRIPT}"
    assert match.group(1) == getattr(binaries, name)


def test_cache_is_keyed_by_kubernetes_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBSET_CACHE_DIR", "/somewhere")
    assert binaries.cached_bin_dir() == Path(f"/somewhere/k8s-{binaries.K8S_VERSION}/bin")


def test_prebuilt_directory_wins_over_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("etcd", "etcdctl", "kube-apiserver", "kubectl"):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.delenv("JOBSET_K8S_BIN", raising=False)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert binaries.ensure_binaries() == tmp_path


def test_incomplete_prebuilt_directory_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etcd").write_text("")
    monkeypatch.setenv("JOBSET_K8S_BIN", str(tmp_path))
    monkeypatch.setenv("JOBSET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(binaries, "repo_root", lambda: None)
    with pytest.raises(binaries.BinariesMissing, match="JOBSET_K8S_BIN"):
        binaries.ensure_binaries()


def fake_apiserver(directory: Path, version: str) -> Path:
    script = directory / "kube-apiserver"
    script.write_text(f"#!/bin/sh\necho 'Kubernetes {version}'\n")
    script.chmod(0o755)
    return directory


def test_kube_version_reads_what_the_apiserver_reports(tmp_path: Path) -> None:
    assert binaries.kube_version(fake_apiserver(tmp_path, "v1.37.2")) == (1, 37, 2)


def test_a_workload_api_cluster_on_older_binaries_fails_with_the_reason(tmp_path: Path) -> None:
    """Not a skip: the gang tests must not pass by not running on binaries that cannot serve
    the API (JOBSET_K8S_BIN pointing at 1.36, say)."""
    plane = ControlPlane(bin_dir=fake_apiserver(tmp_path, "v1.36.3"), workload_api=True)
    with pytest.raises(ControlPlaneError, match=r"needs Kubernetes >= 1.37; .* holds 1.36.3"):
        plane.start()
