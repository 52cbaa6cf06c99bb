"""`Manager.run`: the phases of a process, in order, over the runnable groups.

Belongs here: the order of the phases and how each ends the run. What each part is lives in its
own module (environment, certificates, servers, controllers, leadership, shutdown, preload), and
`assembly` builds them and declares their runnables; this one walks the groups:

1. connect: the API client every part shares (closed last);
2. build (`assembly`): the controllers' units, after what a unit must ask the API server first,
   the placement probe, the certificates and the servers; every part declares its runnables,
   and every readiness check joins /readyz as it is declared;
3. SERVERS: /healthz, /readyz and /metrics answer;
4. WEBHOOKS: certificates (the rotator writes its Secret on every replica), then the webhook
   server, in the background;
5. CACHES: the informers list and watch, unled (reading is harmless, and a new leader starts with
   full caches); the run waits for every one of them (`cache_sync_timeout`, 2 minutes, like
   controller-runtime's CacheSyncTimeout; exit 1 after that);
6. OTHERS: Event writers, loop-lag sampling, the warm-up;
7. lead: with leader election, acquire the Lease. Nothing in the LEADER group runs before it;
8. LEADER: the exclusive-placement probe, then every controller's workers and the memory trim;
9. work until a stop is requested, the Lease is lost (workers cancelled, recorded Events
   written, exit 1: shutdown.py) or a runnable fails (exit 1);
10. stop (shutdown.py): the pod webhooks stop gating followers, drain, release the Lease,
    flush Events; exit 0.

However the run ends, every started group is cancelled (newest first) before the clients close.

Time: every wait the manager makes is measured on its one Clock, which it hands to every piece
it builds that waits (queue, workers, informers, leader election, Events, certificates, the
placement probe), so their timing guarantees are tested on the fake clock. Below them, the HTTP
transports' socket timeouts (runtime/http1client.py, http1server.py) and the credential file's
re-read interval (runtime/kubeconfig.py) run on the loop's monotonic time: I/O deadlines, not
decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog
from prometheus_client import GC_COLLECTOR, CollectorRegistry, PlatformCollector, ProcessCollector

from jobset_controller.manager import assembly, certificates, controllers, leadership, servers
from jobset_controller.manager.clients import Clients, CredentialsError, connect
from jobset_controller.manager.environment import (
    ManagerOptions,
    new_identity,
)
from jobset_controller.manager.shutdown import Deposed, stop_deposed, stop_gracefully
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.http1server import ACCEPT_ERRORS
from jobset_controller.runtime.leaderelection import LeaderElector
from jobset_controller.runtime.looplag import LoopLagMonitor
from jobset_controller.runtime.memtrim import malloc_trim
from jobset_controller.runtime.metrics_and_health import AcceptErrorsCollector
from jobset_controller.runtime.runnables import Group, NotSynced, Runnables

log = structlog.get_logger("manager")
_T = TypeVar("_T")


class _Exit(Exception):
    """Raised by a phase of `Manager.run` to end the run with `code` (after teardown)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Manager:
    """One process run; see the module docstring."""

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
        # The served ports' refused accepts: one process-wide collector (http1server), in every
        # registry a manager serves (a second manager on the same registry finds it there).
        with contextlib.suppress(ValueError):
            registry.register(AcceptErrorsCollector(ACCEPT_ERRORS))
        self.registry = registry
        # One time line and one source of jitter for every runtime piece built here.
        self.clock: Clock = clock or RealClock()
        self.rng = rng
        self.identity = new_identity()
        self.stop_requested = asyncio.Event()
        self.health, probes = servers.health_server(
            options.config, options.effective_health_probe_bind_address
        )
        self.runnables = Runnables(self.clock, on_ready_check=self.health.add_readiness_check)
        self.runnables.add(probes)
        self.parts: assembly.Parts | None = None
        self.elector: LeaderElector | None = None

    @property
    def controller(self) -> assembly.Controller | None:
        """The JobSet controller, once built (tests and benchmarks reach into it)."""
        return None if self.parts is None else self.parts.controller

    @property
    def units(self) -> tuple[controllers.ControllerUnit, ...]:
        return () if self.parts is None else self.parts.units

    @property
    def webhooks(self) -> servers.Webhooks | None:
        return None if self.parts is None else self.parts.webhooks

    @property
    def lag(self) -> LoopLagMonitor | None:
        return None if self.parts is None else self.parts.lag

    @property
    def webhook_port(self) -> int | None:
        """The port the webhook server listens on, once it does."""
        return self.webhooks.port if self.webhooks is not None else None

    def caches_synced(self) -> bool:
        """Every informer of every unit has listed (False before `run` built them)."""
        caches = self.runnables.of(Group.CACHES)
        return bool(caches) and all(part.ready is None or part.ready() for part in caches)

    def request_stop(self) -> None:
        self.stop_requested.set()

    async def run(self) -> int:
        """Run until stopped; returns the process exit code (module docstring)."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                clients = await self._connect(stack)
                stack.push_async_callback(self.runnables.stop_all)
                await self._build(clients)
                await self.runnables.start(Group.SERVERS)
                await self.runnables.start(Group.WEBHOOKS)
                await self._sync_caches()
                await self.runnables.start(Group.OTHERS)
                renew = await self._lead(stack)
                await self.runnables.start(Group.LEADER)
                await self._work_until_stopped(renew)
                await self._stop(renew)
                return 0
        except _Exit as end:
            return end.code

    # ------------------------------------------------------------------------ phases
    async def _connect(self, stack: contextlib.AsyncExitStack) -> Clients:
        """The API clients (`clients.connect`), closed last; a bad kubeconfig ends the run."""
        try:
            return await connect(self.options, stack, self.registry, self.clock, self.rng)
        except CredentialsError as error:
            raise _Exit(1) from error

    async def _build(self, clients: Clients) -> None:
        """Construct every part and declare its runnables; nothing runs or listens yet."""
        try:
            self.parts = await assembly.build(
                self.options,
                clients.main,
                self.runnables,
                review_client=clients.reviews,
                registry=self.registry,
                identity=self.identity,
                clock=self.clock,
                rng=self.rng,
                wait=self._unless_stopped,
            )
        except certificates.CertificateError as error:
            log.error(str(error))
            raise _Exit(1) from error

    async def _sync_caches(self) -> None:
        """Start the CACHES group and wait for every informer's first list."""
        limit = self.options.cache_sync_timeout
        try:
            await self._unless_stopped(self.runnables.start(Group.CACHES, limit=limit))
        except NotSynced:
            log.error("caches did not sync", timeout=limit)
            raise _Exit(1) from None
        gc.freeze()  # the initial lists are long-lived: keep them out of the collector's scans
        malloc_trim()  # the list pages' garbage (runtime/memtrim.py); a standby stays here
        cached = sum(len(informer.store) for unit in self.units for informer in unit.informers)
        log.info("caches synced", objects=cached)

    async def _lead(self, stack: contextlib.AsyncExitStack) -> asyncio.Task[None] | None:
        """With leader election, acquire the Lease and keep renewing it (the returned task
        raises LeadershipLost when renewal fails); without it, nothing to do."""
        opts = self.options
        if not opts.effective_leader_elect:
            return None
        lease_client = await self._unless_stopped(
            leadership.connect_lease_client(opts, clock=self.clock, rng=self.rng)
        )
        stack.push_async_callback(lease_client.close)
        self.elector = leadership.elector(
            opts,
            lease_client,
            identity=self.identity,
            registry=self.registry,
            clock=self.clock,
            rng=self.rng,
        )
        self.health.add_liveness_check("leaderElection", self.elector.healthy)
        await self._unless_stopped(self.elector.acquire())
        renew = asyncio.create_task(self.elector.renew_until_lost(), name="lease-renew")
        stack.push_async_callback(_cancel, renew)
        return renew

    async def _work_until_stopped(self, renew: asyncio.Task[None] | None) -> None:
        """Until a stop is requested; a lost Lease or a failed runnable ends the run with 1."""
        stop = asyncio.create_task(self.stop_requested.wait())
        watched: set[asyncio.Task[Any]] = {stop, *self.runnables.tasks()}
        if renew is not None:
            watched.add(renew)
        try:
            while True:
                done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                if renew is not None and renew in done:
                    log.error("leader election lost, exiting", error=str(renew.exception()))
                    await self._deposed()
                    raise _Exit(1)
                for task in done - {stop}:
                    if not task.cancelled() and task.exception() is not None:
                        log.error("a part of the controller failed, exiting", part=task.get_name())
                        raise _Exit(1)
                if stop in done:
                    return
                watched -= done  # parts that ended on their own (the warm-up, a probe)
        finally:
            stop.cancel()

    async def _stop(self, renew: asyncio.Task[None] | None) -> None:
        if self.webhooks is not None:
            # First, on every replica: no new follower behind our gate (the successor may be
            # upstream's controller); the ones already gated are logged after the drain.
            self.webhooks.server.stop_gating()
        try:
            await stop_gracefully(
                self.runnables,
                renew=renew,
                elector=self.elector,
                shutdown_timeout=self.options.shutdown_timeout,
                event_flush_timeout=self.options.event_flush_timeout,
            )
        except Deposed:
            await self._deposed()
            raise _Exit(1) from None

    async def _deposed(self) -> None:
        """The Lease is lost: workers cancelled, recorded Events written (shutdown.py)."""
        await stop_deposed(
            self.runnables, event_flush_timeout=self.options.deposed_event_flush_timeout
        )

    async def _unless_stopped(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """`coro`'s result, unless a stop is requested first (SIGTERM while warming up, standing
        by or still talking to an API server that does not answer): then `coro` is cancelled
        and the run ends with 0 at once, through the exit stack's cleanup."""
        task = asyncio.create_task(coro)
        stop = asyncio.create_task(self.stop_requested.wait())
        done, _ = await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            stop.cancel()
            return task.result()
        await _cancel(task)
        raise _Exit(0)


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
