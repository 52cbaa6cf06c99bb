"""Where the controller keeps its webhook certificate Secret, and where its Lease lives."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobset_controller.manager import controller_namespace, environment, leader_election_namespace


@pytest.fixture
def outside_a_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    missing = tmp_path / "namespace"
    monkeypatch.setattr(environment, "_SA_NAMESPACE_FILE", missing)
    return missing


def test_the_pods_namespace_comes_first(
    outside_a_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside_a_cluster.write_text("from-file\n")
    assert controller_namespace("lease-ns") == "from-file"
    monkeypatch.setenv("POD_NAMESPACE", "from-env")
    assert controller_namespace("lease-ns") == "from-env"
    # The Lease's namespace is a separate, explicit choice.
    assert leader_election_namespace("lease-ns") == "lease-ns"


@pytest.mark.usefixtures("outside_a_cluster")
def test_outside_a_cluster_the_leader_election_namespace_then_default() -> None:
    assert controller_namespace("lease-ns") == "lease-ns"
    assert controller_namespace("") == "default"
    assert leader_election_namespace("") == "default"
