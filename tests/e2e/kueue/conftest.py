"""Fixtures for the Kueue e2e tests (marker `kueue`): the real Kueue manager admitting JobSets that
`jobset-controller run` runs on the full local cluster.

Sharing, to keep the suite to a few minutes on two cores: one FullCluster and one controller for
the whole package (`kueue_cluster`); one Kueue per test module (`kueue`), configured by the
module's `KUEUE_OPTIONS` (Kueue's settings such as `waitForPodsReady` are global, so a module that
needs other settings gets its own Kueue on the same cluster). Every test gets a fresh namespace
and its own ClusterQueue, LocalQueue and flavors (`KueueNamespace`), so tests do not share quota.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from jobset_controller_dev.envtest.controller import write_configuration
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kueue import Kueue
from jobset_controller_dev.envtest.kueue_objects import KueueNamespace
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port, processes_mentioning, wait_healthy

KEEP = os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1"


def suite_configuration() -> dict[str, Any]:
    """Configuration sections the whole suite's controllers run with, from the environment, so
    the suite can be run with a feature gate or option on (issue 27: each on and off):
    `JOBSET_E2E_FEATURE_GATES="ExecutionAttemptsTracking=true,..."` (the file's featureGates)
    and `JOBSET_E2E_DEFER_CHILDREN=1` (deferredChildren.enable). Unset: upstream's defaults."""
    sections: dict[str, Any] = {}
    gates = {}
    for item in filter(None, os.environ.get("JOBSET_E2E_FEATURE_GATES", "").split(",")):
        name, _, value = item.strip().partition("=")
        gates[name] = value.lower() == "true"
    if gates:
        sections["featureGates"] = gates
    if os.environ.get("JOBSET_E2E_DEFER_CHILDREN") == "1":
        sections["deferredChildren"] = {"enable": True}
    return sections


@contextlib.contextmanager
def jobset_controller(
    cluster: FullCluster, log_name: str, configuration: dict[str, Any] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`jobset-controller run` against `cluster` as a user runs it; stopped with SIGTERM, and it
    must exit 0.

    Its Configuration turns internal certificate management off and points the webhook at a free
    port and an empty certificate directory of its own: two controllers run side by side here
    (MultiKueue's manager and worker), so neither may take the default port or directory, and
    without certificates no webhook is served (the in-memory defaulting stands in).
    `configuration` adds sections (feature gates, deferredChildren); None: the suite's
    (`suite_configuration`)."""
    health = free_port()
    log = cluster.workdir / log_name
    stem = log_name.removesuffix(".log")
    config = cluster.workdir / f"{stem}.config.yaml"
    write_configuration(
        config,
        {
            "internalCertManagement": {"enable": False},
            "webhook": {
                "host": "127.0.0.1",
                "port": free_port(),
                "certDir": str(cluster.workdir / f"{stem}-webhook-certs"),
            },
            **(suite_configuration() if configuration is None else configuration),
        },
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobset_controller",
            "run",
            f"--kubeconfig={cluster.kubeconfig}",
            "--leader-elect=false",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            "--log-format=json",
            f"--config={config}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    try:
        wait_healthy(  # scales its `within`
            health,
            running=lambda: proc.poll() is None,
            exited=lambda: AssertionError(
                f"jobset-controller exited {proc.poll()}:\n{log.read_text()[-3000:]}"
            ),
            late=lambda seen: AssertionError(
                f"jobset-controller not ready: {seen}:\n{log.read_text()[-3000:]}"
            ),
            within=60,
            interval=0.2,
        )
    except AssertionError:
        proc.kill()
        raise
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=scaled(60))
        assert code == 0, f"jobset-controller exited {code}:\n{log.read_text()[-3000:]}"


@contextlib.contextmanager
def cluster_with_controller(
    configuration: dict[str, Any] | None = None,
) -> Iterator[FullCluster]:
    """A FullCluster with our controller; on exit, nothing it started may still run."""
    cluster = FullCluster(keep_workdir=KEEP).start()
    marker = str(cluster.workdir)
    try:
        with jobset_controller(cluster, "jobset-controller.log", configuration):
            yield cluster
    finally:
        cluster.stop()
        leftovers = processes_mentioning(marker)
        assert leftovers == [], f"processes left running after the cluster stopped: {leftovers}"


@pytest.fixture(scope="package")
def kueue_cluster() -> Iterator[FullCluster]:
    with cluster_with_controller() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kueue(request: pytest.FixtureRequest, kueue_cluster: FullCluster) -> Iterator[Kueue]:
    """One Kueue per module, with the module's `KUEUE_OPTIONS` (keyword arguments of Kueue)."""
    options: dict[str, Any] = dict(getattr(request.module, "KUEUE_OPTIONS", {}))
    instance = Kueue(kueue_cluster, **options).start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def kenv(kueue_cluster: FullCluster, kueue: Kueue) -> Iterator[KueueNamespace]:
    """A fresh namespace with helpers for its queues (see KueueNamespace)."""
    ns = kueue_cluster.create_namespace(f"kueue-{uuid.uuid4().hex[:8]}")
    env = KueueNamespace(kueue_cluster, ns)
    try:
        yield env
    finally:
        env.cleanup()


@pytest.fixture(scope="module")
def kueue_worker() -> Iterator[tuple[FullCluster, Kueue]]:
    """A second cluster for MultiKueue: its own control plane, our controller and Kueue."""
    with cluster_with_controller() as cluster:
        kueue = Kueue(cluster).start()
        try:
            yield cluster, kueue
        finally:
            kueue.stop()
