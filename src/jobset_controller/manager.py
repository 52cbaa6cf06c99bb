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

Each step is one method of `Manager` (a phase): `run` only lists them in order. A phase registers
what it opens on the run's exit stack and what it runs in the background on the run's task set;
on any exit the tasks are cancelled first, then the stack unwinds in reverse. Every wait is
measured on the manager's one Clock, which it also hands to every runtime piece it builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import random
import socket
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import structlog
from prometheus_client import GC_COLLECTOR, CollectorRegistry, PlatformCollector, ProcessCollector

from jobset_controller import __version__
from jobset_controller.api import FeatureGates
from jobset_controller.config import Configuration
from jobset_controller.controller.executor import Executor, JobSetMetrics
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.controller.placement_mode import PlacementMode
from jobset_controller.controller.pods import PodPlacementController
from jobset_controller.controller.resources import PVCS
from jobset_controller.controller.webhookcerts import rotator_settings
from jobset_controller.runtime.certrotator import CertRotator
from jobset_controller.runtime.certs import CertPolicy
from jobset_controller.runtime.client import ClientSettings, KubeClient, NotFound
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock, wait_for
from jobset_controller.runtime.events import EventMetrics, EventRecorder
from jobset_controller.runtime.httpserver import HealthServer, MetricsServer, parse_bind_address
from jobset_controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)
from jobset_controller.runtime.looplag import LoopLagMonitor
from jobset_controller.runtime.memtrim import malloc_trim, trim_once_quiet
from jobset_controller.runtime.metrics_workqueue import PrometheusWorkQueueMetricsProvider
from jobset_controller.runtime.metricsauth import DelegatingAuth
from jobset_controller.runtime.servingtls import (
    has_chain,
    self_signed_context,
    server_context,
)
from jobset_controller.runtime.tlsreload import ReloadingTLS
from jobset_controller.runtime.workers import Workers
from jobset_controller.runtime.workqueue import WorkQueue
from jobset_controller.webhook.pods import FollowerMode, Lookups
from jobset_controller.webhook.server import WebhookServer

log = structlog.get_logger("manager")

T = TypeVar("T")

CONTROLLER_NAME = "jobset"
# Bounds of a graceful shutdown, together under Kubernetes' default 30 s grace period.
_EVENT_FLUSH_TIMEOUT = 5.0
_DEFAULT_WEBHOOK_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # controller-runtime's
_DEFAULT_METRICS_CERT_DIR = "/tmp/k8s-metrics-server/serving-certs"  # controller-runtime's
_SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class ManagerOptions:
    """Everything `run` needs, after flags have been merged over the Configuration file."""

    config: Configuration
    kubeconfig: str | None = None
    metrics_bind_address: str = ":8443"
    # HTTPS with TokenReview + SubjectAccessReview on every request (upstream's only mode);
    # False serves plain HTTP to anyone (`--metrics-secure=false`).
    metrics_secure: bool = True
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = True
    qps: float = 500.0
    burst: int = 500
    workers: int = 4
    cache_sync_timeout: float = 120.0
    shutdown_timeout: float = 20.0
    # Internal certificate management: lifetimes and lookahead (upstream's by default), and
    # names the serving certificate carries besides the Service's (e.g. 127.0.0.1 when an API
    # server on the same host calls the webhook by URL, as in tests).
    cert_policy: CertPolicy = field(default_factory=CertPolicy)
    cert_extra_sans: tuple[str, ...] = ()


def _pod_namespace() -> str:
    """POD_NAMESPACE (the manifests set it from the downward API), else the service-account
    namespace file; "" outside a cluster."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return _SA_NAMESPACE_FILE.read_text().strip()
    except OSError:
        return ""


def leader_election_namespace(configured: str) -> str:
    """Configured value, else the pod's namespace, else `default` (running outside a cluster)."""
    return configured or _pod_namespace() or "default"


def controller_namespace(leader_election_configured: str) -> str:
    """Where the webhook certificate Secret lives: the pod's own namespace (where its Deployment
    and Secret are installed), else, outside a cluster, the configured leader-election namespace,
    else `default`. In a cluster it is the same answer as upstream's (the service-account file)."""
    return _pod_namespace() or leader_election_configured or "default"


# The webhook server's listen retries (seconds).
_LISTEN_RETRY_FIRST = 1.0
_LISTEN_RETRY_MAX = 30.0


class _Exit(Exception):
    """Raised by a phase of `Manager.run` to end the run with `code` (after teardown)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class _Webhooks:
    """The admission webhook server, the certificate it serves (followed on disk) and, with
    internal certificate management, what keeps that certificate in the Secret and on disk."""

    server: WebhookServer
    tls: ReloadingTLS
    rotator: CertRotator | None

    def serving(self) -> bool:
        """Readiness: a certificate from disk is loaded and the server listens with it."""
        return self.tls.loaded and self.server.listening


@dataclass(frozen=True)
class _Parts:
    """What `Manager._build` constructs and the later phases run."""

    controller: JobSetController
    queue: WorkQueue[str]
    recorder: EventRecorder
    workers: Workers
    webhooks: _Webhooks | None
    lag: LoopLagMonitor
    metrics_tls: ReloadingTLS | None  # the metrics certificate from certDir, followed on disk
    placement: _Placement | None = None  # exclusive placement: the pod controller and the mode


@dataclass(frozen=True)
class _Placement:
    """The pod controller of exclusive placement, its queue and workers, and the mode in force
    (docs/behaviour.md#exclusive-placement)."""

    pods: PodPlacementController
    queue: WorkQueue[str]
    workers: Workers
    mode: PlacementMode


class _Tasks:
    """The run's background tasks; leaving the context cancels them all and awaits them."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[Any]] = []

    async def __aenter__(self) -> _Tasks:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.cancel_all()

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.append(task)
        return task

    async def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# What the warm-up loads once the process is ready, in order: the API models (and pydantic),
# reconcile and JobSet admission are not on the path to /readyz (api/__init__.py), so the first
# pass or review would import them otherwise. One module per step; pydantic, the largest, is
# split in two.
WARM_UP_MODULES = (
    "pydantic_core",
    "pydantic.main",
    "jobset_controller.api.types",
    "jobset_controller.api.validation",
    "jobset_controller.reconcile.steps",
    "jobset_controller.webhook.admission",
)


async def _warm_up() -> None:
    """Load and build what the first pass and the first admission need, once the process is
    ready (the modules above, then the models' validators: api/warmup.py), so neither pays for
    it (~0.1 s of CPU on the 2-core development machine). Each step runs in a loop turn of its
    own (tens of ms there), with a 1 ms pause between them: a probe, a pass or a review that
    arrives meanwhile waits for one step, not for all of them. A failure only costs the first
    call the time it would have taken anyway."""
    try:
        for module in WARM_UP_MODULES:
            await asyncio.sleep(0.001)
            importlib.import_module(module)
        await asyncio.sleep(0.001)
        from jobset_controller.api.warmup import warm_up

        warm_up()
    except Exception as error:
        log.warning("model warm-up failed", error=str(error))
    # The modules and models loaded here live as long as the process: keep them out of the
    # collector's full scans, as the caches' first lists are (`_sync_caches`).
    gc.freeze()


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
        if registry is None:
            # This process's own registry: it also reports the process (CPU, memory, open
            # files, start time) and Python's runtime, as upstream's does the Go runtime.
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            registry.register(GC_COLLECTOR)
        self.registry = registry
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
        self.metrics: MetricsServer | None = None  # built with the client (it reviews tokens)
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
        """Run until stopped; returns the process exit code.

        Each phase below starts one part of the lifecycle (module docstring). What it opens
        (clients, servers) it registers on `stack`, released in reverse order; what it runs in
        the background it spawns on `tasks`. However the run ends, every task is cancelled first
        (a deposed leader's workers stop before anything else happens), then `stack` unwinds.
        A phase that must end the run raises `_Exit` with the exit code. A new part of the
        process (another server, another controller) is one more phase here.
        """
        try:
            async with contextlib.AsyncExitStack() as stack, _Tasks() as tasks:
                client = await self._connect(stack)
                parts = self._build(client)
                await self._serve(stack, parts)
                self._serve_webhooks(stack, tasks, parts)
                self._start_background(tasks, parts)
                await self._sync_caches(parts)
                tasks.spawn(_warm_up(), "warm-up")
                renew = await self._lead(stack, tasks)
                # Only a leader writes Jobs, so only a leader needs the mode (and a standby must
                # send nothing but reads: the probe is a dry-run create).
                await self._detect_placement_mode(tasks, parts)
                working = tasks.spawn(self._all_workers(parts), "workers")
                tasks.spawn(trim_once_quiet(lambda: parts.queue.idle, self.clock), "memory-trim")
                await self._work_until_stopped(working, renew)
                await self._drain(parts, working, renew)
                await self._flush_events(parts.recorder)
                return 0
        except _Exit as end:
            return end.code

    # ------------------------------------------------------------------------ phases
    async def _connect(self, stack: contextlib.AsyncExitStack) -> KubeClient:
        """The API client every part shares (closed last)."""
        opts = self.options
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
            raise _Exit(1) from problem
        stack.push_async_callback(client.close)
        return client

    def _build(self, client: KubeClient) -> _Parts:
        """Construct the controller's pieces; nothing runs or listens yet."""
        opts = self.options
        features = FeatureGates.from_mapping(opts.config.feature_gates)
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
        placement = self._placement(client, recorder)
        self.controller = JobSetController(
            client,
            placement_mode=placement.mode,
            enqueue=queue.add,
            executor=Executor(client, recorder, JobSetMetrics(self.registry)),
            recorder=recorder,
            features=features,
            clock=self.clock,
            rng=self.rng,
        )
        webhooks = self._webhooks(
            client,
            features,
            pod_lookups=Lookups(placement.pods.leaders, placement.pods.node_labels),
        )
        self.health.add_liveness_check("ping", lambda: True)
        self.health.add_readiness_check("informers", self.caches_synced)
        if webhooks is not None:
            self.health.add_readiness_check("webhook", webhooks.serving)
        workers = Workers(
            CONTROLLER_NAME,
            queue,
            self.controller.reconcile,
            workers=opts.workers,
            registry=self.registry,
            object_label="jobset",
            clock=self.clock,
        )
        self.lag = LoopLagMonitor(clock=self.clock, registry=self.registry)
        metrics_tls = self._metrics_server(client)
        return _Parts(
            controller=self.controller,
            queue=queue,
            recorder=recorder,
            workers=workers,
            webhooks=webhooks,
            lag=self.lag,
            metrics_tls=metrics_tls,
            placement=placement,
        )

    def _placement(self, client: KubeClient, recorder: EventRecorder) -> _Placement:
        """The pod controller runs whether or not the webhooks are served: pods of Jobs
        created while they were active still need releasing and repairing."""
        queue: WorkQueue[str] = WorkQueue("pod", clock=self.clock)
        pods = PodPlacementController(
            client, enqueue=queue.add, recorder=recorder, clock=self.clock, rng=self.rng
        )
        # Own metrics would clash with the JobSet controller's names in this registry.
        workers = Workers("pod", queue, pods.reconcile, workers=2, clock=self.clock)
        mode = PlacementMode(
            client,
            controller_namespace(self.options.config.leader_election.resource_namespace),
            follower_mode=self.options.config.exclusive_placement.followers,
            registry=self.registry,
            clock=self.clock,
        )
        return _Placement(pods=pods, queue=queue, workers=workers, mode=mode)

    def _informers(self, parts: _Parts) -> tuple[Any, ...]:
        placement = parts.placement.pods.informers if parts.placement is not None else ()
        return (*parts.controller.informers, *placement)

    async def _detect_placement_mode(self, tasks: _Tasks, parts: _Parts) -> None:
        """Which exclusive-placement mode new Jobs get: probe the pod webhooks once (after the
        webhook server listens, 15 s at most), and a few times more in the first 30 s if the
        fallback mode was found (`PlacementMode.settle`). Nothing probes on a timer after that:
        a pass about to create exclusive Jobs from a mode older than `PROBE_PERIOD` probes again
        first (`PlacementMode.fresh`), so an idle controller sends nothing."""
        if parts.placement is None:
            return
        webhooks = parts.webhooks
        if webhooks is not None:
            deadline = self.clock.now() + 15.0
            while not webhooks.serving() and self.clock.now() < deadline:
                await self.clock.sleep(0.1)
        await parts.placement.mode.check(first=True)
        tasks.spawn(parts.placement.mode.settle(), "placement-mode-settle")

    async def _all_workers(self, parts: _Parts) -> None:
        """The JobSet workers and the pod workers; cancelled together when draining ends."""
        async with asyncio.TaskGroup() as group:
            group.create_task(parts.workers.run())
            if parts.placement is not None:
                group.create_task(parts.placement.workers.run())

    async def _serve(self, stack: contextlib.AsyncExitStack, parts: _Parts) -> None:
        """/metrics and the probes; stopped in reverse."""
        assert self.metrics is not None  # built by _build
        await self.metrics.start()
        stack.push_async_callback(self.metrics.stop)
        await self.health.start()
        stack.push_async_callback(self.health.stop)

    def _serve_webhooks(
        self, stack: contextlib.AsyncExitStack, tasks: _Tasks, parts: _Parts
    ) -> None:
        """Certificates, then the webhook server, in the background: the rotator (internal
        management) fills the Secret and certDir, the TLS watcher follows certDir, and the server
        starts listening once a certificate is loaded. Until then /readyz fails its `webhook`
        check, and the controller itself already runs: reconciling needs no webhook."""
        webhooks = parts.webhooks
        if webhooks is None:
            return
        stack.push_async_callback(webhooks.server.stop)
        if webhooks.rotator is not None:
            tasks.spawn(webhooks.rotator.run(), "webhook-certificates")
        tasks.spawn(webhooks.tls.run(), "webhook-certificate-files")
        tasks.spawn(self._start_webhook_server(webhooks), "webhook-server")

    async def _start_webhook_server(self, webhooks: _Webhooks) -> None:
        """Listen, retrying while the port is taken (a previous process on the host network
        still holding it, say): 1 s doubling to 30 s. Not fatal to reconciling; /readyz says
        the webhook is not served until it is."""
        await webhooks.tls.wait_loaded()
        delay = _LISTEN_RETRY_FIRST
        while True:
            try:
                await webhooks.server.start()
                break
            except OSError as error:
                log.error("webhook server cannot listen", error=str(error), retry_in_s=delay)
            await self.clock.sleep(delay)
            delay = min(delay * 2, _LISTEN_RETRY_MAX)
        self.webhook_port = webhooks.server.port

    def _start_background(self, tasks: _Tasks, parts: _Parts) -> None:
        """Loop-lag sampling, the Event writer and the informers (they warm up unled)."""
        tasks.spawn(parts.lag.run(), "loop-lag")
        if parts.metrics_tls is not None:
            tasks.spawn(parts.metrics_tls.run(), "metrics-certificate")
        tasks.spawn(parts.recorder.run(), "events")
        for informer in self._informers(parts):
            tasks.spawn(informer.run(), f"informer-{informer.resource.plural}")

    async def _sync_caches(self, parts: _Parts) -> None:
        """Wait for every informer's first list, at most `cache_sync_timeout`."""
        timeout = self.options.cache_sync_timeout
        if not await self._wait(self._wait_for_caches(self._informers(parts)), timeout):
            if self.stop_requested.is_set():
                raise _Exit(0)  # asked to stop while warming up
            log.error("caches did not sync", timeout=timeout)
            raise _Exit(1)
        gc.freeze()  # the initial lists are long-lived: keep them out of the collector's scans
        malloc_trim()  # the list pages' garbage (runtime/memtrim.py); a standby stays here
        log.info("caches synced", jobsets=len(parts.controller.jobsets.store))

    async def _lead(
        self, stack: contextlib.AsyncExitStack, tasks: _Tasks
    ) -> asyncio.Task[None] | None:
        """With leader election, acquire the Lease and keep renewing it (the returned task
        raises LeadershipLost when renewal fails); without it, nothing to do."""
        opts = self.options
        if not opts.leader_elect:
            return None
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
        stack.push_async_callback(lease_client.close)
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
            raise _Exit(0)  # asked to stop while standing by
        return tasks.spawn(self.elector.renew_until_lost(), "lease-renew")

    async def _work_until_stopped(
        self, working: asyncio.Task[Any], renew: asyncio.Task[None] | None
    ) -> None:
        """Reconcile until a stop is requested; lost leadership or dead workers end the run."""
        stop = asyncio.create_task(self.stop_requested.wait())
        waits: set[asyncio.Future[Any]] = {stop, working}
        if renew is not None:
            waits.add(renew)
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if renew is not None and renew in done:
            log.error("leader election lost, exiting", error=str(renew.exception()))
            raise _Exit(1)
        if working in done and working.exception() is not None:
            log.error("workers failed", error=str(working.exception()))
            raise _Exit(1)

    async def _drain(
        self, parts: _Parts, working: asyncio.Task[Any], renew: asyncio.Task[None] | None
    ) -> None:
        """Let in-flight reconciles finish (bounded), stop every worker, then release the Lease.

        The Lease is still watched while draining: a deposed leader must stop at once.
        """
        log.info("shutting down: finishing in-flight reconciles")
        drain = asyncio.create_task(
            parts.queue.shut_down_with_drain(timeout=self.options.shutdown_timeout)
        )
        done, _ = await asyncio.wait(
            {drain} | ({renew} if renew is not None else set()),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if renew is not None and renew in done:
            drain.cancel()
            log.error("leader election lost while shutting down, exiting")
            raise _Exit(1)
        if not drain.result():
            log.warning("in-flight reconciles did not finish in time; cancelling them")
        # No worker may write once the lease is released: stop them all first.
        working.cancel()
        await asyncio.gather(working, return_exceptions=True)
        await parts.controller.expectations.close()  # its timer only enqueues: no worker is left
        if renew is not None:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
                await renew
        if self.elector is not None:
            await self.elector.release()

    async def _flush_events(self, recorder: EventRecorder) -> None:
        """Write what the recorder still buffers, for `_EVENT_FLUSH_TIMEOUT` at most."""
        try:
            await wait_for(self.clock, recorder.flush(), _EVENT_FLUSH_TIMEOUT)
        except TimeoutError:
            log.warning("pending events not written before exit")

    def _metrics_server(self, client: KubeClient) -> ReloadingTLS | None:
        """Build `self.metrics`; returns the certificate watcher to run when certDir serves.

        Secure (the default): HTTPS, every request reviewed by the API server. The certificate
        is `metrics.certDir`'s tls.crt/tls.key, followed on disk; an empty certDir means
        controller-runtime's default directory when internal certificate management is off
        (cert-manager mounts the metrics Secret there), and otherwise, or when the files are
        missing, a self-signed certificate made in memory now (scrapers skip verification).
        """
        opts, config = self.options, self.options.config
        if not opts.metrics_secure or parse_bind_address(opts.metrics_bind_address) is None:
            if opts.metrics_secure is False:
                log.warning("metrics served over plain HTTP without authentication")
            self.metrics = MetricsServer(self.registry, opts.metrics_bind_address)
            return None
        min_version, ciphers = config.tls.min_version, config.tls.cipher_suites
        configured = config.metrics.cert_dir
        cert_dir = Path(configured or _DEFAULT_METRICS_CERT_DIR)
        reloading: ReloadingTLS | None = None
        if (configured or not config.internal_cert_management.enable) and has_chain(cert_dir):
            reloading = ReloadingTLS(
                cert_dir / "tls.crt",
                cert_dir / "tls.key",
                make_context=lambda: server_context(min_version, ciphers),
                clock=self.clock,
            )
            if not reloading.reload():
                log.error("metrics certificate cannot be loaded", cert_dir=str(cert_dir))
                raise _Exit(1)
            tls = reloading.context
        else:
            if configured:
                log.warning(
                    "metrics certDir has no tls.crt/tls.key; serving a self-signed certificate",
                    cert_dir=configured,
                )
            tls = self_signed_context(min_version, ciphers)
        self.metrics = MetricsServer(
            self.registry,
            opts.metrics_bind_address,
            tls=tls,
            auth=DelegatingAuth(client.create, clock=self.clock),
        )
        return reloading

    def _webhooks(
        self, client: KubeClient, features: FeatureGates, *, pod_lookups: Lookups | None = None
    ) -> _Webhooks | None:
        """The admission webhook server and where its certificate comes from.

        With internal certificate management (the default, like upstream) the rotator keeps the
        Secret `internalCertManagement.webhookSecretName` in the controller's namespace and writes
        its certificate to certDir. Without it the certificate must be in certDir already
        (cert-manager's Secret mounted there); when it is not, no webhook is served and the
        controller's in-memory defaulting and validation stand in (docs/behaviour.md). Either
        way the files are followed on disk, so a renewed certificate is served without a restart.
        """
        opts = self.options
        cfg, internal = opts.config.webhook, opts.config.internal_cert_management
        cert_dir = Path(cfg.cert_dir or _DEFAULT_WEBHOOK_CERT_DIR)
        rotator: CertRotator | None = None
        min_version, ciphers = opts.config.tls.min_version, opts.config.tls.cipher_suites
        tls = ReloadingTLS(
            cert_dir / "tls.crt",
            cert_dir / "tls.key",
            make_context=lambda: server_context(min_version, ciphers),
            clock=self.clock,
        )
        if internal.enable:
            settings = rotator_settings(
                namespace=controller_namespace(opts.config.leader_election.resource_namespace),
                service_name=internal.webhook_service_name,
                secret_name=internal.webhook_secret_name,
                cert_dir=cert_dir,
                policy=opts.cert_policy,
                extra_sans=opts.cert_extra_sans,
            )
            rotator = CertRotator(
                client, settings, on_files=tls.reload, clock=self.clock, rng=self.rng
            )
            log.info(
                "internal certificate management",
                secret=f"{settings.namespace}/{settings.secret_name}",
                dns_names=list(settings.identity.dns_names),
                cert_dir=str(cert_dir),
            )
        elif not tls.reload():
            log.info("admission webhooks not served: no tls.crt/tls.key", cert_dir=str(cert_dir))
            return None

        async def lookup_claim(namespace: str, name: str) -> dict[str, Any] | None:
            try:
                return await client.get(PVCS.path(namespace, name))
            except NotFound:
                return None

        server = WebhookServer(
            lookup_claim=lookup_claim,
            features=features,
            ssl_context=tls.context,
            host=cfg.host,
            port=cfg.port,
            registry=self.registry,
            pod_lookups=pod_lookups,
            follower_mode=FollowerMode(opts.config.exclusive_placement.followers),
        )
        return _Webhooks(server=server, tls=tls, rotator=rotator)

    async def _wait_for_caches(self, informers: Any) -> None:
        for informer in informers:
            await informer.wait_synced()

    async def _wait(self, coro: Coroutine[Any, Any, Any], limit: float | None) -> bool:
        """Await `coro` unless a stop is requested first or `limit` seconds pass (on the
        manager's clock); True if it ran."""
        task = asyncio.create_task(coro)
        stop = asyncio.create_task(self.stop_requested.wait())
        racing: set[asyncio.Future[Any]] = {task, stop}
        if limit is not None:
            racing.add(asyncio.create_task(self.clock.sleep(limit)))
        done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        for pending in racing:
            if pending not in done:
                pending.cancel()
        if task in done:
            task.result()
            return True
        return False
