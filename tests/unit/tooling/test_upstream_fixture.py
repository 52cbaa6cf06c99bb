"""The upstream-controller finder: version agreement with hack/upstream-jobset.sh, and its order
(JOBSET_UPSTREAM_BIN when complete, then the version-keyed cache; never the script when either
holds a complete layout)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobset_controller_dev.envtest import upstream

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "upstream-jobset.sh"


def _layout(home: Path) -> Path:
    """A fake hack/upstream-jobset.sh layout under `home`; returns its bin directory."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / upstream.MANAGER).write_text("#!/bin/sh\n")
    (bin_dir / upstream.MANAGER).chmod(0o755)
    for sub in ("crd", "webhook", "rbac", "charts/jobset"):
        (home / sub).mkdir(parents=True)
    (home / "crd" / "jobset.x-k8s.io_jobsets.yaml").write_text("kind: CustomResourceDefinition\n")
    (home / "webhook" / "manifests.yaml").write_text("---\n")
    (home / "charts" / "jobset" / "Chart.yaml").write_text("name: jobset\n")
    return bin_dir


def test_script_default_matches_python_version() -> None:
    text = SCRIPT.read_text()
    match = re.search(r'^UPSTREAM_VERSION="\$\{UPSTREAM_JOBSET_VERSION:-([^}]+)\}"', text, re.M)
    assert match is not None
    assert match.group(1) == upstream.UPSTREAM_VERSION


def test_script_writes_the_layout_the_finder_checks() -> None:
    text = SCRIPT.read_text()
    assert f'"$bin_dir/{upstream.MANAGER}"' in text
    for piece in ("crd", "webhook/manifests.yaml", "rbac", "charts/jobset/Chart.yaml"):
        assert piece in text


def test_prebuilt_directory_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = _layout(tmp_path / "prebuilt")
    monkeypatch.setenv("JOBSET_UPSTREAM_BIN", str(bin_dir))
    monkeypatch.setenv("JOBSET_CACHE_DIR", str(tmp_path / "cache"))
    assert upstream.ensure_upstream() == bin_dir
    assert upstream.upstream_chart(bin_dir) == tmp_path / "prebuilt" / "charts" / "jobset"
    assert upstream.upstream_crds(bin_dir) == [
        tmp_path / "prebuilt" / "crd" / "jobset.x-k8s.io_jobsets.yaml"
    ]


def test_incomplete_prebuilt_falls_back_to_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    incomplete = tmp_path / "prebuilt" / "bin"
    incomplete.mkdir(parents=True)
    (incomplete / upstream.MANAGER).write_text("")
    cached = _layout(tmp_path / "cache" / f"upstream-jobset-{upstream.UPSTREAM_VERSION}")
    monkeypatch.setenv("JOBSET_UPSTREAM_BIN", str(incomplete))
    monkeypatch.setenv("JOBSET_CACHE_DIR", str(tmp_path / "cache"))
    assert upstream.ensure_upstream() == cached
