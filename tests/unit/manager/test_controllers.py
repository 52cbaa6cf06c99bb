"""Each controller is a unit with its own name on everything it exports (manager/controllers.py),
and the manager's readiness covers every informer of every unit by construction:

- the pod controller's queue and reconcile samples are labelled `pod`, beside `jobset`'s, in one
  registry; its Events are reported by the `pod` recorder (upstream's names);
- stopping a unit drains its queue: an in-flight reconcile finishes, it is not cancelled;
- /readyz's checks are every informer of both units plus the webhook, with nothing listed twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from jobset_controller.api import FeatureGates
from jobset_controller.config import parse_configuration
from jobset_controller.controller.placement_mode import PlacementMode
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller.manager.clients import Clients
from jobset_controller.manager.controllers import (
    ControllerUnit,
    SharedMetrics,
    Wiring,
    jobset_unit,
    pod_unit,
)
from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.events import EventRecorder
from jobset_controller.runtime.runnables import Group, Runnables
from jobset_controller.runtime.servingtls import self_signed_pem
from jobset_controller.runtime.workers import ReconcileMetrics, Workers
from jobset_controller.runtime.workqueue import WorkQueue


class NoClient:
    """Building the units sends nothing: any call is a failure of this test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the client was used: {name}")

    def with_own_budget(self) -> NoClient:
        return self  # the events' client: made while building, and it sends nothing either


def both_units(registry: CollectorRegistry) -> tuple[ControllerUnit, ControllerUnit]:
    clock = FakeClock()
    wiring = Wiring(NoClient(), SharedMetrics.of(registry), "me", clock)  # type: ignore[arg-type]
    pods = pod_unit(wiring, workers=2)
    jobsets = jobset_unit(
        wiring,
        workers=4,
        features=FeatureGates.from_mapping({}),
        placement_mode=PlacementMode(None, "ns", follower_mode="Reject", clock=clock),
        registry=registry,
    )
    return jobsets.unit, pods.unit


def test_the_pod_controller_exports_its_own_queue_and_reconcile_metrics() -> None:
    registry = CollectorRegistry()
    both_units(registry)
    for controller, workers in (("jobset", 4), ("pod", 2)):
        labels = {"controller": controller}
        assert registry.get_sample_value(
            "controller_runtime_max_concurrent_reconciles", labels
        ) == (workers)
        assert (
            registry.get_sample_value(
                "controller_runtime_reconcile_total", {**labels, "result": "success"}
            )
            == 0
        )
        queue = {"name": controller, "controller": controller, "priority": ""}
        assert registry.get_sample_value("workqueue_depth", queue) == 0


def test_each_controller_reports_its_events_under_its_own_name() -> None:
    jobsets, pods = both_units(CollectorRegistry())
    assert jobsets.recorder.reporting_controller == "jobset"
    assert pods.recorder.reporting_controller == "pod"
    assert pods.recorder.reporting_instance == jobsets.recorder.reporting_instance == "me"


async def test_stopping_a_unit_lets_its_in_flight_reconcile_finish() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue("pod", clock=clock)
    began, release, finished = asyncio.Event(), asyncio.Event(), []

    async def reconcile(key: str) -> None:
        began.set()
        await release.wait()
        finished.append(key)

    unit = ControllerUnit(
        "pod",
        (),
        queue,
        Workers("pod", queue, reconcile, workers=2, metrics=ReconcileMetrics(None), clock=clock),
        EventRecorder(NoClient(), reporting_controller="pod", clock=clock),
        clock,
    )
    runnables = Runnables(clock)
    for part in unit.runnables():
        runnables.add(part)
    await runnables.start(Group.LEADER)
    queue.add("ns/job-uid")
    await began.wait()
    stopping = asyncio.create_task(runnables.stop(Group.LEADER, budget=20))
    await clock.advance(10)
    assert not stopping.done()  # draining, not cancelled
    release.set()
    assert await stopping
    assert finished == ["ns/job-uid"]


INFORMER_CHECKS = [
    "informer-jobs",
    "informer-jobsets",
    "informer-nodes",
    "informer-persistentvolumeclaims",
    "informer-pods",
    "informer-services",
]


def built(cert_dir: Path) -> tuple[Manager, list[str]]:
    """A manager built with its webhook certificate in `cert_dir`, and the readiness checks it
    declared."""
    config = parse_configuration(
        {"internalCertManagement": {"enable": False}, "webhook": {"certDir": str(cert_dir)}}
    )
    manager = Manager(
        ManagerOptions(config=config, metrics_bind_address="0", health_probe_bind_address="0")
    )
    registered: list[str] = []
    manager.runnables.on_ready_check = lambda name, check: registered.append(name)
    asyncio.run(manager._build(Clients(NoClient(), NoClient())))  # type: ignore[arg-type]
    assert not manager.caches_synced()
    return manager, sorted(registered)


def readiness_checks(cert_dir: Path) -> list[str]:
    """The readiness checks a manager declares when its webhook certificate is in `cert_dir`."""
    return built(cert_dir)[1]


def with_certificate(cert_dir: Path) -> Path:
    cert, key = self_signed_pem("localhost")
    (cert_dir / CERT_FILE).write_bytes(cert)
    (cert_dir / KEY_FILE).write_bytes(key)
    return cert_dir


def test_readiness_is_every_informer_of_every_unit_and_the_webhook(tmp_path: Path) -> None:
    assert readiness_checks(with_certificate(tmp_path)) == sorted([*INFORMER_CHECKS, "webhook"])


def test_without_a_webhook_certificate_readiness_is_the_informers(tmp_path: Path) -> None:
    assert readiness_checks(tmp_path) == INFORMER_CHECKS


def test_with_the_webhooks_served_every_units_workers_share_one_switch(tmp_path: Path) -> None:
    """runtime/switchinterval.py: one count for the process, so one unit's reconcile ending
    cannot lengthen the interval while another's runs."""
    manager, _ = built(with_certificate(tmp_path))
    switches = {id(unit.workers.switch) for unit in manager.units}
    assert len(manager.units) == 2
    assert len(switches) == 1
    assert manager.units[0].workers.switch is not None


def test_without_the_webhooks_no_unit_touches_the_switch_interval(tmp_path: Path) -> None:
    manager, _ = built(tmp_path)
    assert [unit.workers.switch for unit in manager.units] == [None, None]
