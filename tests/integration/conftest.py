"""Fixtures for tests against a real etcd + kube-apiserver.

One control plane serves the whole test session (starting one costs about 5 s); every test gets a
fresh namespace so tests cannot see each other's objects. After the session the control plane is
stopped and the teardown fails if any process it started is still alive.

The in-process controller runs as a ServiceAccount bound only to the shipped roles
(manifests/rbac/role.yaml), as it runs in a cluster: a grant the code needs but the roles lack
fails these tests with a 403 instead of passing under an admin identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest

import jobset_controller.reconcile as reconcile_package
from jobset_controller.config import parse_configuration
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller.reconcile import Plan, Snapshot
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.identities import shipped_rbac
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.polling import eventually, scaled
from jobset_controller_dev.envtest.processes import processes_mentioning


@pytest.fixture(scope="package")
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
        control_plane.delete_namespace(name)


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    """Our own raw-JSON client (runtime.client), authenticated as the admin."""
    client = await KubeClient.connect(kubeconfig=str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


CONTROLLER_ACCOUNT = "controller-manager"


@pytest.fixture(scope="package")
def controller_account(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """(its namespace, a kubeconfig) for a ServiceAccount bound only to the shipped roles, shared
    by the session (the roles are cluster-wide, so one identity serves every test's namespace;
    its namespace holds the webhook certificate Secret the controller manages)."""
    home = f"jobset-system-{uuid.uuid4().hex[:6]}"
    directory = tmp_path_factory.mktemp("controller-identity")
    try:
        with shipped_rbac(control_plane, home, [CONTROLLER_ACCOUNT], directory) as kubeconfigs:
            yield home, kubeconfigs[CONTROLLER_ACCOUNT]
    finally:
        control_plane.delete_namespace(home)


@pytest.fixture(scope="package")
def controller_kubeconfig(controller_account: tuple[str, Path]) -> Path:
    return controller_account[1]


@pytest.fixture
async def controller(
    controller_account: tuple[str, Path], tmp_path: Path
) -> AsyncIterator[Manager]:
    """The JobSet controller running in this test's event loop (no leader election), as the
    shipped ServiceAccount, with the default internal certificate management: its Secret in the
    account's namespace, its webhook server on a free loopback port, certificates under tmp."""
    async with running_controller(controller_account, tmp_path) as manager:
        yield manager


@contextlib.asynccontextmanager
async def running_controller(
    controller_account: tuple[str, Path],
    tmp_path: Path,
    *,
    feature_gates: Mapping[str, bool] | None = None,
) -> AsyncIterator[Manager]:
    """The controller of the ``controller`` fixture, with the Configuration's ``featureGates``
    (upstream's gate names) for a module that needs gates on; stopped on exit."""
    home, kubeconfig = controller_account
    config = parse_configuration(
        {
            "leaderElection": {"resourceNamespace": home},
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path / "webhook")},
            **({"featureGates": dict(feature_gates)} if feature_gates else {}),
        }
    )
    options = ManagerOptions(
        config=config,
        kubeconfig=str(kubeconfig),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        leader_elect=False,
    )
    manager = Manager(options)
    task = asyncio.create_task(manager.run())
    while not manager.caches_synced():
        if task.done():
            task.result()
            raise AssertionError("manager stopped before its caches synced")
        await asyncio.sleep(0.05)  # poll interval of the wait for the condition above
    try:
        yield manager
    finally:
        manager.request_stop()
        assert await asyncio.wait_for(task, scaled(30)) == 0


@pytest.fixture
def sim(kube: KubeClient, namespace: str) -> KubeSim:
    return KubeSim(kube, namespace)


@dataclasses.dataclass(frozen=True)
class Pass:
    """One reconcile pass of the in-process controller: the JobSet's key, what it saw, and what it
    decided."""

    key: str
    snapshot: Snapshot
    plan: Plan

    def job_names(self) -> set[str]:
        return {str(job["metadata"]["name"]) for job in self.snapshot.jobs}

    def writes_nothing(self) -> bool:
        """The plan sends no request: no write, no event (a requeue is no request)."""
        return dataclasses.replace(self.plan, requeue_after=None).is_empty()


class Passes:
    """Every pass of the pure reconcile, in order. A test of "nothing happens" waits for the pass
    that saw the change, then asserts on what that pass planned, instead of sleeping and hoping
    the controller looked meanwhile."""

    def __init__(self) -> None:
        self.seen: list[Pass] = []

    def mark(self) -> int:
        """A position: passes after it took their snapshot after this call."""
        return len(self.seen)

    def since(self, mark: int, key: str) -> list[Pass]:
        return [p for p in self.seen[mark:] if p.key == key]

    async def first(
        self, key: str, matching: Callable[[Pass], bool], what: str, *, since: int = 0
    ) -> Pass:
        """The first pass of ``key`` after ``since`` that ``matching`` accepts, once it happened."""
        found: list[Pass] = []

        def check() -> bool:
            found[:] = [p for p in self.since(since, key) if matching(p)][:1]
            return bool(found)

        await eventually(check, what, 45.0)
        return found[0]


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> Passes:
    """Records every pass of the controller's pure reconcile (the controller calls it through
    the package attribute, so replacing that attribute sees every pass, from any worker)."""
    recorder = Passes()
    real = reconcile_package.reconcile

    def recording(snapshot: Snapshot) -> Plan:
        plan = real(snapshot)
        meta = snapshot.jobset.metadata
        recorder.seen.append(Pass(f"{meta.namespace}/{meta.name}", snapshot, plan))
        return plan

    monkeypatch.setattr(reconcile_package, "reconcile", recording)
    return recorder
