"""Fixtures for tests against a real etcd + kube-apiserver.

One control plane serves the whole test session (starting one costs about 5 s); every test gets a
fresh namespace so tests cannot see each other's objects. After the session the control plane is
stopped and the teardown fails if any process it started is still alive.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from jobset_controller.envtest import ControlPlane
from jobset_controller.envtest.processes import processes_mentioning
from jobset_controller.runtime.client import KubeClient


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane().start()
    marker = str(plane.workdir)
    try:
        yield plane
    finally:
        plane.stop()
        leftovers = processes_mentioning(marker)
        assert leftovers == [], (
            f"processes left running after the control plane stopped: {leftovers}"
        )


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:8]}"
    status, body = control_plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, body
    try:
        yield name
    finally:
        control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    """Our own raw-JSON client (runtime.client), authenticated as the admin."""
    client = await KubeClient.connect(kubeconfig=str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        await client.close()
