"""Fixtures for tests against the full local cluster (tests/e2e, marked `e2e`).

One `FullCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and 8
simulated nodes; starting it costs about 7 s) serves the whole session; every test gets a fresh
namespace in which pods can be created at once. After the session the cluster is stopped and the
teardown fails if any process it started is still alive. Set JOBSET_E2E_KEEP_WORKDIR=1 to keep the
cluster's directory (component logs, kubeconfigs, kwok.yaml) for a look after the run.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest.controller import ControllerProcess
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.processes import free_port, processes_mentioning


@pytest.fixture(scope="package")
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


@dataclass(frozen=True)
class ControllerEndpoints:
    """Where the session's controller serves /metrics and its (unregistered) webhooks."""

    metrics: str
    webhook: str


@pytest.fixture(scope="package")
def controller_endpoints(full_cluster: FullCluster) -> ControllerEndpoints:
    return ControllerEndpoints(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")


@pytest.fixture(scope="package")
def jobset_controller(
    full_cluster: FullCluster, controller_endpoints: ControllerEndpoints
) -> Iterator[subprocess.Popen[bytes]]:
    """`jobset-controller run` against the full cluster, as a user runs it (one per session).

    It serves /metrics and the JobSet webhooks (with a certificate of the cluster's CA; no
    webhook configuration points at them) so a real Prometheus can scrape every metric family.
    """
    health = free_port()
    log = full_cluster.workdir / "jobset-controller.log"
    cert_dir = full_cluster.workdir / "controller-webhook-certs"
    full_cluster.ca.write_pair(
        cert_dir, "controller-webhook", common_name="webhook", ip_addresses=("127.0.0.1",),
        server=True,
    )  # fmt: skip
    webhook_host, _, webhook_port = controller_endpoints.webhook.rpartition(":")
    config = full_cluster.workdir / "jobset-controller-config.yaml"
    config.write_text(
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n"
        f"webhook: {{host: '{webhook_host}', port: {webhook_port}, certDir: '{cert_dir}'}}\n"
        # The certificate above, as cert-manager would mount it: nothing managed internally.
        "internalCertManagement: {enable: false}\n"
    )
    process = ControllerProcess(
        kubeconfig=full_cluster.kubeconfig,
        config=config,
        log=log,
        metrics=controller_endpoints.metrics,
        health_port=health,
        args=["--leader-elect=false", "--log-format=json"],
    )
    try:
        process.wait_ready(60, interval=0.2)
    except AssertionError as error:
        process.proc.kill()
        raise AssertionError(f"jobset-controller did not become ready: {error}") from None
    try:
        yield process.proc
    finally:
        code = process.stop(60)
        assert code == 0, f"jobset-controller exited {code}:\n{process.tail()}"


@pytest.fixture
async def kube(cluster: FullCluster) -> AsyncIterator[KubeClient]:
    """An async API client for the module's own ``cluster`` fixture (the modules that start a
    cluster of their own and talk to it with our client)."""
    client = await KubeClient.connect(kubeconfig=str(cluster.kubeconfig))
    try:
        yield client
    finally:
        await client.close()
