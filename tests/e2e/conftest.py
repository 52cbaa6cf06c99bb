"""Fixtures for tests against the full local cluster (tests/e2e, marked `e2e`).

One `FullCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and 8
simulated nodes; starting it costs about 7 s) serves the whole session; every test gets a fresh
namespace in which pods can be created at once. After the session the cluster is stopped and the
teardown fails if any process it started is still alive. Set JOBSET_E2E_KEEP_WORKDIR=1 to keep the
cluster's directory (component logs, kubeconfigs, kwok.yaml) for a look after the run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from jobset_controller.envtest.fullcluster import FullCluster
from jobset_controller.envtest.processes import processes_mentioning


@pytest.fixture(scope="session")
def full_cluster() -> Iterator[FullCluster]:
    cluster = FullCluster(keep_workdir=os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1").start()
    marker = str(cluster.workdir)
    try:
        yield cluster
    finally:
        cluster.stop()
        leftovers = processes_mentioning(marker)
        assert leftovers == [], f"processes left running after the cluster stopped: {leftovers}"


@pytest.fixture
def namespace(full_cluster: FullCluster) -> Iterator[str]:
    name = full_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:8]}")
    try:
        yield name
    finally:
        full_cluster.delete_namespace(name)
