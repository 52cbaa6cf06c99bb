"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's algorithm.

Why our own: the Python client's elector judges expiry by the wall clock, has no jitter, no fast
path, never counts leaseTransitions, cannot release, and keeps the process running when
leadership is lost (checked on kubernetes 36 and 37). The rules here:

- Expiry is judged on the local MONOTONIC clock from the moment this process last saw the Lease
  record change, never from the renewTime written in it, so clock offsets between nodes are
  harmless.
- Any failure of one attempt (an error answer, a dropped connection, a timeout) only fails that
  attempt; the loops keep trying until their deadlines.
- Every write is a PUT of the object last read, carrying its resourceVersion: if two candidates
  race, the apiserver lets exactly one win (409 for the other).
- Candidates retry every retryPeriod x (1 + random x 1.2).
- The leader renews every retryPeriod; if no renewal succeeds within renewDeadline it has lost
  and `renew_until_lost` raises LeadershipLost. There is no fencing, so the caller must stop all
  work at once (our manager exits non-zero, as controller-runtime does).
- Every wait and deadline is measured on the injected Clock (monotonic), and the jitter drawn
  from the injected RandomSource, so tests can step them on virtual time.
- On graceful shutdown `release()` empties the holder with leaseDurationSeconds 1 so a successor
  takes over in about a second instead of waiting out the lease.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from jobset_controller.runtime.client import KubeClient, NotFound
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock, wait_for
from jobset_controller.runtime.resources import LEASES

log = structlog.get_logger("leaderelection")

JITTER_FACTOR = 1.2


class LeadershipLost(Exception):
    """Renewal failed for longer than renewDeadline: stop everything guarded by the lease."""


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the Lease lives, who we are, and client-go's three timings (seconds). No defaults:
    the controller's come from its Configuration (`leaderElection`), their one owner."""

    namespace: str
    identity: str
    name: str
    lease_duration: float
    renew_deadline: float
    retry_period: float

    def validate(self) -> None:
        """client-go's rule: leaseDuration > renewDeadline > 1.2 x retryPeriod > 0."""
        if self.retry_period <= 0:
            raise ValueError("retryPeriod must be greater than zero")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")


def _micro_time(now: datetime.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return tuple(
        spec.get(k)
        for k in (
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaseTransitions",
        )
    )


class LeaderElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        rng: RandomSource = random,
        wall_clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        config.validate()
        self._client = client
        self.config = config
        self._clock: Clock = clock or RealClock()
        self._rng = rng
        self._wall_clock = wall_clock
        self._lease: dict[str, Any] | None = None
        self._observed_record: tuple[Any, ...] | None = None
        self._observed_time = 0.0
        self.is_leader = False
        self._status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=registry,
        )
        self._slowpath = Counter(
            "leader_election_slowpath",
            "Total number of slow path exercised in renewing leader leases.",
            ["name"],
            registry=registry,
        )
        self._status.labels(config.name).set(0)

    @property
    def _path(self) -> str:
        return LEASES.path(self.config.namespace, self.config.name)

    @property
    def _request_timeout(self) -> float:
        return max(self.config.renew_deadline / 2, 1.0)

    def _set_leader(self, leader: bool) -> None:
        if leader != self.is_leader:
            log.info(
                "became leader" if leader else "stopped leading",
                lease=self.config.name,
                identity=self.config.identity,
            )
        self.is_leader = leader
        self._status.labels(self.config.name).set(1 if leader else 0)

    def healthy(self, tolerance: float = 20.0) -> bool:
        """Liveness (client-go's healthz adaptor): a leader whose last successful renewal is older
        than leaseDuration + `tolerance` has a stuck renew loop and should be restarted."""
        if not self.is_leader:
            return True
        return self._clock.now() - self._observed_time <= self.config.lease_duration + tolerance

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease."""
        log.info("attempting to acquire leader lease", lease=self.config.name)
        while not await self.try_acquire_or_renew():
            await self._clock.sleep(
                self.config.retry_period * (1 + self._rng.random() * JITTER_FACTOR)
            )
        self._set_leader(True)

    async def renew_until_lost(self) -> None:
        """Renew every retryPeriod; raise LeadershipLost when renewDeadline passes without one."""
        while True:
            deadline = self._clock.now() + self.config.renew_deadline
            renewed = False
            while not renewed:
                remaining = deadline - self._clock.now()
                if remaining <= 0:
                    break
                try:
                    renewed = await wait_for(self._clock, self.try_acquire_or_renew(), remaining)
                except TimeoutError:
                    break
                if not renewed:
                    await self._clock.sleep(min(self.config.retry_period, max(remaining, 0)))
            if not renewed:
                self._set_leader(False)
                raise LeadershipLost(f"failed to renew lease {self.config.name}")
            await self._clock.sleep(self.config.retry_period)

    async def try_acquire_or_renew(self) -> bool:
        now = self._wall_clock()
        cfg = self.config
        if self.is_leader and self._lease is not None and self._valid():
            lease = _with_spec(self._lease, renewTime=_micro_time(now))
            try:
                self._observe(await self._put(lease))
                return True
            except Exception as error:  # any failure only fails this attempt
                self._slowpath.labels(cfg.name).inc()
                log.info("lease fast-path renew failed", lease=cfg.name, error=str(error))
        try:
            current = await self._client.request(
                "GET", self._path, request_timeout=self._request_timeout
            )
        except NotFound:
            return await self._create(now)
        except Exception as error:  # any failure only fails this attempt
            log.warning("reading lease failed", lease=cfg.name, error=str(error))
            return False
        if _record(current) != self._observed_record:
            self._observed_record = _record(current)
            self._observed_time = self._clock.now()
        self._lease = current
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != cfg.identity and self._valid(spec.get("leaseDurationSeconds")):
            if self.is_leader:
                self._set_leader(False)
            return False
        changes: dict[str, Any] = {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": int(cfg.lease_duration),
            "renewTime": _micro_time(now),
        }
        if holder != cfg.identity:
            changes["acquireTime"] = _micro_time(now)
            changes["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            self._observe(await self._put(_with_spec(current, **changes)))
        except Exception as error:  # any failure only fails this attempt
            log.info("lease update failed", lease=cfg.name, error=str(error))
            return False
        return True

    async def release(self) -> None:
        """Give the Lease up (only if we hold it) so a successor need not wait it out."""
        if not self.is_leader:
            return
        now = _micro_time(self._wall_clock())
        try:
            current = await self._client.request(
                "GET", self._path, request_timeout=self._request_timeout
            )
            if (current.get("spec") or {}).get("holderIdentity") == self.config.identity:
                await self._put(
                    _with_spec(
                        current,
                        holderIdentity="",
                        leaseDurationSeconds=1,
                        acquireTime=now,
                        renewTime=now,
                    )
                )
                log.info("released leader lease", lease=self.config.name)
        except Exception as error:  # any failure only fails this attempt
            log.warning("releasing lease failed", lease=self.config.name, error=str(error))
        finally:
            self._set_leader(False)

    # ------------------------------------------------------------------------- helpers
    def _valid(self, duration: float | None = None) -> bool:
        seconds = float(duration if duration is not None else self.config.lease_duration)
        return self._observed_time + seconds > self._clock.now()

    def _observe(self, lease: dict[str, Any]) -> None:
        self._lease = lease
        self._observed_record = _record(lease)
        self._observed_time = self._clock.now()

    async def _put(self, lease: dict[str, Any]) -> dict[str, Any]:
        return await self._client.request(
            "PUT", self._path, body=lease, request_timeout=self._request_timeout
        )

    async def _create(self, now: datetime.datetime) -> bool:
        cfg = self.config
        lease = {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": {"name": cfg.name, "namespace": cfg.namespace},
            "spec": {
                "holderIdentity": cfg.identity,
                "leaseDurationSeconds": int(cfg.lease_duration),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self._client.request(
                "POST",
                LEASES.path(cfg.namespace),
                body=lease,
                request_timeout=self._request_timeout,
            )
        except Exception as error:  # any failure only fails this attempt
            log.info("creating lease failed", lease=cfg.name, error=str(error))
            return False
        self._observe(created)
        return True


def _with_spec(lease: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**lease, "spec": {**(lease.get("spec") or {}), **changes}}
