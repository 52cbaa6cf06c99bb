"""Wires configuration -> client -> informers -> queue -> workers -> leader election -> servers.

Lifecycle of `Manager.run()` (controller-runtime's order and guarantees):

1. Serve /metrics and the health probes; /healthz answers at once, /readyz only once every
   informer has listed (caches synced).
2. Start the informers. They may warm up before leadership: reading is harmless, and a new leader
   starts with full caches.
3. Wait for the caches (2 minutes at most, like controller-runtime's CacheSyncTimeout).
4. With leader election: acquire the Lease. Nothing is written to the cluster before this point
   (workers are not running; keys just collect in the queue).
5. Start the workers, and keep renewing the Lease.
6. On SIGTERM/SIGINT: stop taking keys, let in-flight reconciles finish (bounded by
   `shutdown_timeout`, 20 s; the rest are cancelled), stop every worker, and only then release
   the Lease and flush pending Events (5 s at most); exit 0. The whole shutdown fits in
   Kubernetes' default 30 s termination grace period. Losing the lease while draining exits 1.
   On lost leadership: stop at once and exit 1 so the process restarts clean (there is no
   fencing; a deposed leader must not write). On a cache that never syncs: exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import socket
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from jobset_controller import __version__
from jobset_controller.api import FeatureGates
from jobset_controller.config import Configuration
from jobset_controller.controller.executor import Executor, JobSetMetrics
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.controller.resources import PVCS
from jobset_controller.runtime.client import ClientSettings, KubeClient, NotFound
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.events import EventMetrics, EventRecorder
from jobset_controller.runtime.httpserver import HealthServer, MetricsServer
from jobset_controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)
from jobset_controller.runtime.looplag import LoopLagMonitor
from jobset_controller.runtime.metrics_workqueue import PrometheusWorkQueueMetricsProvider
from jobset_controller.runtime.workers import Workers
from jobset_controller.runtime.workqueue import WorkQueue
from jobset_controller.webhook.server import WebhookServer

log = structlog.get_logger("manager")

CONTROLLER_NAME = "jobset"
# Bounds of a graceful shutdown, together under Kubernetes' default 30 s grace period.
_EVENT_FLUSH_TIMEOUT = 5.0
_DEFAULT_WEBHOOK_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # controller-runtime's
_SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class ManagerOptions:
    """Everything `run` needs, after flags have been merged over the Configuration file."""

    config: Configuration
    kubeconfig: str | None = None
    metrics_bind_address: str = ":8443"
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = True
    qps: float = 500.0
    burst: int = 500
    workers: int = 4
    cache_sync_timeout: float = 120.0
    shutdown_timeout: float = 20.0


def leader_election_namespace(configured: str) -> str:
    """Configured value, else the pod's namespace, else `default` (running outside a cluster)."""
    if configured:
        return configured
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return _SA_NAMESPACE_FILE.read_text().strip()
    except OSError:
        return "default"


class Manager:
    def __init__(
        self,
        options: ManagerOptions,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        rng: RandomSource = random,
    ):
        self.options = options
        self.registry = registry or CollectorRegistry()
        # One time line and one source of jitter for every runtime piece built here.
        self.clock: Clock = clock or RealClock()
        self.rng = rng
        self.identity = f"{socket.gethostname()}_{uuid.uuid4()}"
        self.stop_requested = asyncio.Event()
        self.health = HealthServer(
            options.health_probe_bind_address,
            readiness_endpoint_name=options.config.health.readiness_endpoint_name,
            liveness_endpoint_name=options.config.health.liveness_endpoint_name,
        )
        self.metrics = MetricsServer(self.registry, options.metrics_bind_address)
        self.elector: LeaderElector | None = None
        self.controller: JobSetController | None = None
        self.lag: LoopLagMonitor | None = None
        self.webhook_port: int | None = None

    def caches_synced(self) -> bool:
        """Every informer has listed (what /readyz reports; False before `run` built them)."""
        return self.controller is not None and all(
            informer.has_synced() for informer in self.controller.informers
        )

    def request_stop(self) -> None:
        self.stop_requested.set()

    async def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        opts = self.options
        features = FeatureGates.from_mapping(opts.config.feature_gates)
        try:
            client = await KubeClient.connect(
                kubeconfig=opts.kubeconfig,
                settings=ClientSettings(
                    qps=opts.qps, burst=opts.burst, user_agent=f"jobset-controller/{__version__}"
                ),
                registry=self.registry,
                clock=self.clock,
                rng=self.rng,
            )
        except Exception as problem:  # a bad kubeconfig or no in-cluster config: say so, no trace
            log.error("cannot load cluster credentials", error=str(problem))
            return 1
        queue: WorkQueue[str] = WorkQueue(
            CONTROLLER_NAME,
            clock=self.clock,
            metrics=PrometheusWorkQueueMetricsProvider(registry=self.registry),
        )
        recorder = EventRecorder(
            client,
            reporting_controller="jobset",
            reporting_instance=self.identity,
            clock=self.clock,
            metrics=EventMetrics(self.registry),
        )
        self.controller = JobSetController(
            client,
            enqueue=queue.add,
            executor=Executor(client, recorder, JobSetMetrics(self.registry)),
            recorder=recorder,
            features=features,
        )
        informers = self.controller.informers
        webhook = self._webhook_server(client, features)
        self.health.add_liveness_check("ping", lambda: True)
        self.health.add_readiness_check("informers", self.caches_synced)
        workers = Workers(
            CONTROLLER_NAME,
            queue,
            self.controller.reconcile,
            workers=opts.workers,
            registry=self.registry,
            object_label="jobset",
            clock=self.clock,
        )
        self.lag = lag = LoopLagMonitor(clock=self.clock, registry=self.registry)
        background: list[asyncio.Task[Any]] = []
        lease_client: KubeClient | None = None

        def spawn(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
            task = asyncio.create_task(coro, name=name)
            background.append(task)
            return task

        try:
            await self.metrics.start()
            await self.health.start()
            if webhook is not None:
                await webhook.start()
                self.webhook_port = webhook.port
            spawn(lag.run(), "loop-lag")
            spawn(recorder.run(), "events")
            for informer in informers:
                spawn(informer.run(), f"informer-{informer.resource.plural}")
            if not await self._wait(self._wait_for_caches(informers), opts.cache_sync_timeout):
                if self.stop_requested.is_set():
                    return 0  # asked to stop while warming up
                log.error("caches did not sync", timeout=opts.cache_sync_timeout)
                return 1
            gc.freeze()  # the initial lists are long-lived: keep them out of the collector's scans
            log.info("caches synced", jobsets=len(self.controller.jobsets.store))

            renew: asyncio.Task[None] | None = None
            if opts.leader_elect:
                le = opts.config.leader_election
                # Its own client (own throttle and connections, like controller-runtime's
                # leader-election client): a burst of 50-wide creates must not delay a renewal.
                lease_client = await KubeClient.connect(
                    kubeconfig=opts.kubeconfig,
                    settings=ClientSettings(
                        qps=20,
                        burst=30,
                        user_agent=f"jobset-controller/{__version__} leader-election",
                    ),
                    clock=self.clock,
                    rng=self.rng,
                )
                self.elector = LeaderElector(
                    lease_client,
                    LeaderElectionConfig(
                        namespace=leader_election_namespace(le.resource_namespace),
                        identity=self.identity,
                        name=le.resource_name,
                        lease_duration=le.lease_duration,
                        renew_deadline=le.renew_deadline,
                        retry_period=le.retry_period,
                    ),
                    registry=self.registry,
                    clock=self.clock,
                    rng=self.rng,
                )
                self.health.add_liveness_check("leaderElection", self.elector.healthy)
                if not await self._wait(self.elector.acquire(), None):
                    return 0  # asked to stop while standing by
                renew = spawn(self.elector.renew_until_lost(), "lease-renew")
            working = spawn(workers.run(), "workers")
            stop = asyncio.create_task(self.stop_requested.wait())
            waits: set[asyncio.Future[Any]] = {stop, working}
            if renew is not None:
                waits.add(renew)
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if renew is not None and renew in done:
                error = renew.exception()
                log.error("leader election lost, exiting", error=str(error))
                return 1
            if working in done and working.exception() is not None:
                log.error("workers failed", error=str(working.exception()))
                return 1
            log.info("shutting down: finishing in-flight reconciles")
            drain = asyncio.create_task(queue.shut_down_with_drain(timeout=opts.shutdown_timeout))
            # Keep watching the lease while draining: a deposed leader must stop at once.
            done, _ = await asyncio.wait(
                {drain} | ({renew} if renew is not None else set()),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if renew is not None and renew in done:
                drain.cancel()
                log.error("leader election lost while shutting down, exiting")
                return 1
            if not drain.result():
                log.warning("in-flight reconciles did not finish in time; cancelling them")
            # No worker may write once the lease is released: stop them all first.
            working.cancel()
            await asyncio.gather(working, return_exceptions=True)
            if renew is not None:
                renew.cancel()
                with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
                    await renew
            if self.elector is not None:
                await self.elector.release()
            try:
                await asyncio.wait_for(recorder.flush(), _EVENT_FLUSH_TIMEOUT)
            except TimeoutError:
                log.warning("pending events not written before exit")
            return 0
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if webhook is not None:
                await webhook.stop()
            await self.health.stop()
            await self.metrics.stop()
            await client.close()
            if lease_client is not None:
                await lease_client.close()

    def _webhook_server(self, client: KubeClient, features: FeatureGates) -> WebhookServer | None:
        """The admission webhook server, when serving certificates are present in certDir.

        Certificates come from cert-manager or a mounted Secret (tls.crt, tls.key); internal
        certificate management is not implemented yet, so without them no webhook is served
        and the controller's in-memory defaulting and validation stand in (docs/reconcile.md).
        """
        cfg = self.options.config.webhook
        cert_dir = Path(cfg.cert_dir or _DEFAULT_WEBHOOK_CERT_DIR)
        if not (cert_dir / "tls.crt").is_file() or not (cert_dir / "tls.key").is_file():
            log.info("admission webhooks not served: no tls.crt/tls.key", cert_dir=str(cert_dir))
            return None

        async def lookup_claim(namespace: str, name: str) -> dict[str, Any] | None:
            try:
                return await client.get(PVCS.path(namespace, name))
            except NotFound:
                return None

        return WebhookServer(
            lookup_claim=lookup_claim,
            features=features,
            cert_dir=cert_dir,
            host=cfg.host,
            port=cfg.port,
        )

    async def _wait_for_caches(self, informers: Any) -> None:
        for informer in informers:
            await informer.wait_synced()

    async def _wait(self, coro: Coroutine[Any, Any, Any], limit: float | None) -> bool:
        """Await `coro` unless a stop is requested first or `limit` seconds pass; True if it ran."""
        task = asyncio.create_task(coro)
        stop = asyncio.create_task(self.stop_requested.wait())
        done, _ = await asyncio.wait({task, stop}, timeout=limit, return_when="FIRST_COMPLETED")
        for pending in (task, stop):
            if pending not in done:
                pending.cancel()
        if task in done:
            task.result()
            return True
        return False
