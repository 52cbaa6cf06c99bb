"""The swap tier (marker `swap`): one full local cluster for every test here, upstream's
controller v0.12.0 found or built once (hack/upstream-jobset.sh), and the Bench of harness.py.

Set JOBSET_E2E_KEEP_WORKDIR=1 to keep the cluster's directory (component logs, the audit log);
the controllers' logs and Configurations are in pytest's temporary directory (`swap0/`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.swap.harness import Bench, release_holds

from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.processes import processes_mentioning
from jobset_controller_dev.envtest.upstream import ensure_upstream

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.swap)


@pytest.fixture(scope="module")
def cluster() -> Iterator[FullCluster]:
    full = FullCluster(keep_workdir=os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1").start()
    marker = str(full.workdir)
    try:
        yield full
    finally:
        full.stop()
        assert processes_mentioning(marker) == [], "processes left running after the cluster"


@pytest.fixture(scope="module")
def bench(cluster: FullCluster, tmp_path_factory: pytest.TempPathFactory) -> Bench:
    return Bench(cluster, tmp_path_factory.mktemp("swap"), ensure_upstream())


@pytest.fixture
def ns(cluster: FullCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace per test, deleted after it (the test's hold finalizers removed first), so
    the next test's exclusive JobSets find every rack free once its pods are gone."""
    name = cluster.create_namespace(f"swap-{request.node.name.split('_')[1]}")
    try:
        yield name
    finally:
        release_holds(cluster, name)
        cluster.delete_namespace(name)
