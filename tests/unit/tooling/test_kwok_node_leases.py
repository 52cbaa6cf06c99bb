"""The simulated nodes' Lease duration at scale: kwok renews every Lease at a quarter of its
duration, so thousands of nodes with the default 40 s keep the API server busy; a longer Lease
must reach kwok's configuration and stretch the node lifecycle controller's grace period, or
nodes would turn NotReady between two renewals."""

from __future__ import annotations

from pathlib import Path

import yaml

from jobset_controller_dev.envtest import kwok_stages
from jobset_controller_dev.envtest.fullcluster import FullCluster


def test_kwok_configuration_carries_the_lease_duration_it_is_given() -> None:
    documents = list(
        yaml.safe_load_all(
            kwok_stages.render_config(
                kubelet_version="v1.37.2", kwok_version="v0.7.0", node_lease_seconds=600
            )
        )
    )
    assert documents[0]["options"]["nodeLeaseDurationSeconds"] == 600


def test_a_longer_lease_gives_the_node_lifecycle_controller_twice_its_grace(
    tmp_path: Path,
) -> None:
    cluster = FullCluster(workdir=tmp_path / "cluster", node_lease_seconds=600)
    assert cluster._node_monitor_args() == ["--node-monitor-grace-period=1200s"]


def test_the_default_lease_keeps_the_controller_managers_default_grace(tmp_path: Path) -> None:
    cluster = FullCluster(workdir=tmp_path / "cluster")
    assert cluster.node_lease_seconds == kwok_stages.NODE_LEASE_SECONDS
    assert cluster._node_monitor_args() == []
