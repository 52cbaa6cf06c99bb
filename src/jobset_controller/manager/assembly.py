"""What the process is made of: every part built and its runnables declared, in one place.

Belongs here: the list of parts and how they are wired to each other (the webhook server reads
the pod controller's caches; the JobSet controller asks the placement probe). A new port, a new
controller or a new background task is one more declaration here; its group decides when it
starts and stops (`runtime/runnables.py`), and its readiness check joins /readyz as it is added.
Nothing here runs or listens: `Manager.run` walks the groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry

from jobset_controller.api import FeatureGates
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.controller.placement_mode import PlacementMode
from jobset_controller.manager import certificates, controllers, servers
from jobset_controller.manager.build_info import register_build_info
from jobset_controller.manager.environment import ManagerOptions, controller_namespace
from jobset_controller.manager.preload import warm_up
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.looplag import LoopLagMonitor
from jobset_controller.runtime.memtrim import trim_once_quiet
from jobset_controller.runtime.metrics_and_health import parse_bind_address
from jobset_controller.runtime.runnables import Group, Runnable, Runnables
from jobset_controller.runtime.switchinterval import SwitchInterval
from jobset_controller.webhook.pods import Lookups

log = structlog.get_logger("manager")

# How long the placement probe waits for the webhook server to listen before it asks.
PROBE_WAITS_FOR_WEBHOOK = 15.0


# The JobSet controller, as the run's parts hold it (lifecycle names no controller type).
Controller = JobSetController


@dataclass(frozen=True)
class Parts:
    """What the rest of the run (and tests, benchmarks) reach into."""

    controller: Controller
    units: tuple[controllers.ControllerUnit, ...]
    webhooks: servers.Webhooks | None
    lag: LoopLagMonitor


async def build(
    options: ManagerOptions,
    client: KubeClient,
    runnables: Runnables,
    *,
    review_client: KubeClient,
    registry: CollectorRegistry,
    identity: str,
    clock: Clock,
    rng: RandomSource,
    wait: controllers.Waiter,
) -> Parts:
    """Build every part on `client` and add its runnables; CertificateError if a configured
    certificate cannot be loaded. What a unit must learn from the API server before it is built
    (the JobSet unit: whether the Workload API is served) is asked first, through `wait`."""
    config, add = options.config, runnables.add
    features = FeatureGates.from_mapping(config.feature_gates)
    scheduling_api = await controllers.workload_api_served(client, features, wait)
    webhook_tls = certificates.webhook_tls(options, client, clock=clock, rng=rng)
    wiring = controllers.Wiring(
        client,
        controllers.SharedMetrics.of(registry),
        identity,
        clock,
        rng,
        events_client=client.with_own_budget(),
        switch=SwitchInterval() if webhook_tls is not None else None,
    )
    placement_mode = PlacementMode(
        client,
        controller_namespace(config.leader_election.resource_namespace),
        follower_mode=config.exclusive_placement.followers,
        registry=registry,
        clock=clock,
    )
    pods = controllers.pod_unit(
        wiring,
        workers=options.pod_workers,
        in_place_restart=features.in_place_restart,
        force_delete=config.unreachable_node_pods.force_delete,
        force_delete_after=config.unreachable_node_pods.force_delete_after,
    )
    jobsets = controllers.jobset_unit(
        wiring,
        workers=options.workers,
        features=features,
        placement_mode=placement_mode,
        registry=registry,
        defer_children=config.deferred_children.enable,
        early_job_conditions=options.effective_early_job_conditions,
        failed_pods=pods.controller.failed_pods,
        pods=pods.controller if features.in_place_restart else None,
        scheduling_api=scheduling_api,
        progress_count_period=config.progress_counts.batch_period,
    )

    register_build_info(registry)
    for part in _metrics(options, review_client, registry=registry, clock=clock):
        add(part)
    webhooks: servers.Webhooks | None = None
    if webhook_tls is not None:
        webhooks = servers.webhooks(
            config,
            webhook_tls,
            client,
            features=features,
            pod_lookups=Lookups(
                pods.controller.leaders,
                pods.controller.node_labels,
                domain_nodes=pods.controller.domain_nodes
                if config.exclusive_placement.follower_node_affinity
                else None,
            ),
            claims=jobsets.controller.pvcs,
            registry=registry,
            clock=clock,
        )
        for part in webhooks.runnables():
            add(part)
    lag = LoopLagMonitor(clock=clock, registry=registry)
    add(Runnable("loop-lag", Group.OTHERS, run=lag.run))
    add(Runnable("warm-up", Group.OTHERS, run=warm_up))
    # Only a leader writes Jobs, so only a leader needs the mode (and a standby must send nothing
    # but reads: the probe is a dry-run create). Added before the units: LEADER runnables start
    # in the order added, and the probe's `start` must answer before a pass creates exclusive
    # Jobs.
    add(
        Runnable(
            "placement-mode",
            Group.LEADER,
            start=lambda: _probe_placement(placement_mode, webhooks, clock),
            run=placement_mode.settle,
        )
    )
    queue = jobsets.unit.queue
    add(
        Runnable(
            "memory-trim", Group.LEADER, run=lambda: trim_once_quiet(lambda: queue.idle, clock)
        )
    )
    units = (jobsets.unit, pods.unit)
    for unit in units:
        for part in unit.runnables():
            add(part)
    return Parts(jobsets.controller, units, webhooks, lag)


def _metrics(
    options: ManagerOptions, reviews: KubeClient, *, registry: CollectorRegistry, clock: Clock
) -> list[Runnable]:
    """The metrics port; `reviews` is the client its TokenReviews and SubjectAccessReviews go
    through (its own budget: `servers.REVIEW_CLIENT_QPS`)."""
    address = options.effective_metrics_bind_address
    tls: certificates.MetricsTLS | None = None
    if options.metrics_secure and parse_bind_address(address) is not None:
        tls = certificates.metrics_tls(options.config, clock=clock)
    elif not options.metrics_secure:
        log.warning("metrics served over plain HTTP without authentication")
    _, parts = servers.metrics_server(registry, address, tls=tls, client=reviews, clock=clock)
    return parts


async def _probe_placement(
    mode: PlacementMode, webhooks: servers.Webhooks | None, clock: Clock
) -> None:
    """Which exclusive-placement mode new Jobs get: probe the pod webhooks once, after the
    webhook server listens (15 s at most); `settle` probes a few times more in the first 30 s
    if the fallback mode was found. Nothing probes on a timer after that: a pass about to create
    exclusive Jobs from a mode older than `PROBE_PERIOD` probes again first."""
    if webhooks is not None:
        deadline = clock.now() + PROBE_WAITS_FOR_WEBHOOK
        while not webhooks.serving() and clock.now() < deadline:
            await clock.sleep(0.1)
    await mode.check(first=True)
