"""The served ports as runnables: health probes, metrics, admission webhooks.

Belongs here: one function per port that builds its server and declares its runnables. A new
port is one more function here and one declaration in `assembly.build`. A server runnable binds
in its `start` (a port that cannot be bound ends the start, except the webhook's, below) and
closes when its task is cancelled, so however the run ends no port stays open.

- health (SERVERS): /healthz answers from the start; /readyz is the conjunction of every
  runnable's readiness check (`Runnables.on_ready_check` adds them here), plain HTTP.
- metrics (SERVERS): HTTPS with TokenReview + SubjectAccessReview, or plain HTTP with
  `--metrics-secure=false`; its certificate watcher runs beside it.
- webhooks (WEBHOOKS): the rotator and the certificate watcher, then the server, which listens
  once a certificate is loaded, retrying while the port is taken (a previous process on the
  host network still holding it): 1 s doubling to 30 s. Not fatal: reconciling needs no
  webhook, and /readyz's `webhook` check says it is not served until it is. The server runs on
  an event loop of its own thread (runtime/loopthread.py: a long reconcile pass on the main
  loop does not hold up an answer); its one call into the API client, the existing-claim
  lookup, is run on the main loop, which the client belongs to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry

from jobset_controller.api import FeatureGates
from jobset_controller.config import Configuration
from jobset_controller.controller.resources import PVCS
from jobset_controller.manager.certificates import MetricsTLS, WebhookTLS
from jobset_controller.runtime.client import KubeClient, NotFound
from jobset_controller.runtime.clock import Clock
from jobset_controller.runtime.loopthread import LoopThread, on_loop
from jobset_controller.runtime.metrics_and_health import HealthServer, MetricsServer
from jobset_controller.runtime.metricsauth import DelegatingAuth
from jobset_controller.runtime.runnables import Group, Runnable
from jobset_controller.webhook.pods import FollowerMode, Lookups
from jobset_controller.webhook.server import WebhookServer

log = structlog.get_logger("manager")

# The metrics endpoint's review client: its own throttle and connections, so scrapes (cached:
# runtime/metricsauth.py, at most 4 reviews in flight) never spend the reconciles' budget.
REVIEW_CLIENT_QPS = 20.0
REVIEW_CLIENT_BURST = 30

LISTEN_RETRY_FIRST = 1.0
LISTEN_RETRY_MAX = 30.0


def health_server(config: Configuration, bind_address: str) -> tuple[HealthServer, Runnable]:
    health = HealthServer(
        bind_address,
        readiness_endpoint_name=config.health.readiness_endpoint_name,
        liveness_endpoint_name=config.health.liveness_endpoint_name,
    )
    health.add_liveness_check("ping", lambda: True)
    return health, Runnable(
        "health-probes", Group.SERVERS, start=health.start, run=_closing(health.stop)
    )


def metrics_server(
    registry: CollectorRegistry,
    bind_address: str,
    *,
    tls: MetricsTLS | None,
    client: KubeClient,
    clock: Clock,
) -> tuple[MetricsServer, list[Runnable]]:
    """`tls` None: plain HTTP for anyone (`--metrics-secure=false`, or the endpoint disabled)."""
    if tls is None:
        server = MetricsServer(registry, bind_address)
    else:
        server = MetricsServer(
            registry,
            bind_address,
            tls=tls.context,
            auth=DelegatingAuth(client.create, clock=clock),
        )
    parts = [Runnable("metrics", Group.SERVERS, start=server.start, run=_closing(server.stop))]
    if tls is not None and tls.watcher is not None:
        parts.append(Runnable("metrics-certificate", Group.SERVERS, run=tls.watcher.run))
    return server, parts


@dataclass
class Webhooks:
    """The admission webhook server and the certificate it serves."""

    server: WebhookServer
    tls: WebhookTLS
    clock: Clock
    port: int | None = field(default=None)
    thread: LoopThread = field(default_factory=lambda: LoopThread("webhook"))

    def serving(self) -> bool:
        """Readiness: a certificate from disk is loaded and the server listens with it."""
        return self.tls.files.loaded and self.server.listening

    def runnables(self) -> list[Runnable]:
        parts = []
        if self.tls.rotator is not None:
            parts.append(Runnable("webhook-certificates", Group.WEBHOOKS, run=self.tls.rotator.run))
        parts.append(Runnable("webhook-certificate-files", Group.WEBHOOKS, run=self.tls.files.run))
        parts.append(Runnable("webhook", Group.WEBHOOKS, run=self._listen, ready=self.serving))
        return parts

    async def _listen(self) -> None:
        try:
            await self.tls.files.wait_loaded()
            self.thread.start()
            delay = LISTEN_RETRY_FIRST
            while True:
                try:
                    await self.thread.call(self.server.start)
                    break
                except OSError as error:
                    log.error("webhook server cannot listen", error=str(error), retry_in_s=delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, LISTEN_RETRY_MAX)
            self.port = self.server.port
            await asyncio.Event().wait()
        finally:
            if self.server.listening:
                await self.thread.call(self.server.stop)
            await self.thread.stop()


def webhooks(
    config: Configuration,
    tls: WebhookTLS,
    client: KubeClient,
    *,
    features: FeatureGates,
    pod_lookups: Lookups,
    claims: ClaimCache,
    registry: CollectorRegistry,
    clock: Clock,
) -> Webhooks:
    """The webhook server; `claims` is the controller's PVC cache (existing claims' names)."""

    server = WebhookServer(
        lookup_claim=on_loop(
            asyncio.get_running_loop(), claim_lookup(lambda path: client.get(path), claims)
        ),
        features=features,
        ssl_context=tls.files.context,
        host=config.webhook.host,
        port=config.webhook.port,
        registry=registry,
        pod_lookups=pod_lookups,
        follower_mode=FollowerMode(config.exclusive_placement.followers),
    )
    return Webhooks(server, tls, clock)


class ClaimCache(Protocol):
    """What the claim lookup reads of the controller's PVC informer."""

    def has_synced(self) -> bool: ...

    @property
    def store(self) -> Container[str]: ...


def claim_lookup(
    get: Callable[[str], Awaitable[dict[str, Any]]], claims: ClaimCache
) -> Callable[[str, str], Awaitable[dict[str, Any] | None]]:
    """The webhook's existing-claim lookup. The cache holds every claim's name (metadata only):
    a claim it has not got does not exist and costs no request; a cached one is read live, for
    the spec the checks compare. Before the cache has listed, every lookup is live."""

    async def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        if claims.has_synced() and f"{namespace}/{name}" not in claims.store:
            return None
        try:
            return await get(PVCS.path(namespace, name))
        except NotFound:
            return None

    return lookup


def _closing(close: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A `run` that waits until cancelled, then awaits `close` (a server's stop)."""

    async def run() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await close()

    return run
