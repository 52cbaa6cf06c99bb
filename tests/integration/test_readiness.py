"""/readyz covers every cache the controller starts, not only the JobSet controller's.

The pod informer of exclusive placement is held back by RBAC (its ServiceAccount may not list
pods): the JobSet caches list, the process answers /healthz, and /readyz keeps failing, naming
`informer-pods`, until the grant is restored and the pods list. A replica that went Ready before
would answer pod admissions from an empty leader cache.
"""

from __future__ import annotations

import asyncio
import copy
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.config import parse_configuration
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.identities import shipped_rbac
from jobset_controller_dev.envtest.polling import eventually, scaled

ACCOUNT = "controller-manager"


@pytest.fixture
def identity(control_plane: ControlPlane, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    home = f"jobset-ready-{uuid.uuid4().hex[:6]}"
    try:
        with shipped_rbac(control_plane, home, [ACCOUNT], tmp_path) as kubeconfigs:
            yield home, kubeconfigs[ACCOUNT]
    finally:
        control_plane.delete_namespace(home)


def _role_path(home: str) -> str:
    return f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{home}-manager-role"


def _without_pods(role: dict[str, Any]) -> dict[str, Any]:
    held = copy.deepcopy(role)
    held["rules"] = [rule for rule in held["rules"] if "pods" not in rule.get("resources", ())]
    return held


def _readyz(port: int) -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}/readyz?verbose"
    try:
        with urllib.request.urlopen(url, timeout=scaled(5)) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.fixture
async def held_back(
    control_plane: ControlPlane, identity: tuple[str, Path], tmp_path: Path
) -> AsyncIterator[tuple[Manager, dict[str, Any]]]:
    """The controller running as a ServiceAccount whose role lacks its pod grants; yields it and
    the full role to restore."""
    home, kubeconfig = identity
    status, role = control_plane.request("GET", _role_path(home))
    assert status == 200, role
    status, reply = control_plane.request("PUT", _role_path(home), _without_pods(role))
    assert status == 200, reply
    config = parse_configuration(
        {
            "leaderElection": {"resourceNamespace": home},
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path / "webhook")},
        }
    )
    manager = Manager(
        ManagerOptions(
            config=config,
            kubeconfig=str(kubeconfig),
            metrics_bind_address="0",
            health_probe_bind_address="127.0.0.1:0",
            leader_elect=False,
        )
    )
    task = asyncio.create_task(manager.run())
    try:
        yield manager, role
    finally:
        manager.request_stop()
        assert await asyncio.wait_for(task, scaled(30)) == 0


async def test_readyz_fails_until_the_pod_informer_lists(
    control_plane: ControlPlane,
    identity: tuple[str, Path],
    held_back: tuple[Manager, dict[str, Any]],
) -> None:
    manager, role = held_back
    await eventually(lambda: manager.controller is not None, "the controller is built", 30)
    assert manager.controller is not None
    jobset_caches = manager.controller.informers
    pods = next(
        informer
        for unit in manager.units
        for informer in unit.informers
        if informer.resource.plural == "pods"
    )
    await eventually(
        lambda: all(informer.has_synced() for informer in jobset_caches) and pods.stats.errors > 0,
        "the JobSet caches listed and the pod list was refused",
        30,
    )
    port = manager.health.port
    assert port is not None
    status, body = await asyncio.to_thread(_readyz, port)
    assert status == 500, body  # controller-runtime's answer for a failed check
    assert "[-]informer-pods failed" in body
    assert "[+]informer-jobsets ok" in body

    path = _role_path(identity[0])
    status, current = control_plane.request("GET", path)
    assert status == 200, current
    status, reply = control_plane.request("PUT", path, {**current, "rules": role["rules"]})
    assert status == 200, reply
    await eventually(pods.has_synced, "the pod informer lists once allowed", 60)
    status, body = await asyncio.to_thread(_readyz, port)
    assert status == 200, body
