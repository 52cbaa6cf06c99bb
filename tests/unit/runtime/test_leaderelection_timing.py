"""Leader election's timing on virtual time (draws fixed at 0.5, conftest).

- A candidate retries every retryPeriod x (1 + draw x 1.2), and takes a Lease over once it has
  not seen the record change for leaseDuration on its own monotonic clock.
- The leader renews every retryPeriod, and gives up exactly when renewDeadline passes without a
  successful renewal (retrying every retryPeriod meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from jobset_controller.runtime.client import NotFound
from jobset_controller.runtime.clock import FakeClock, RandomSource
from jobset_controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)

CONFIG = LeaderElectionConfig(
    namespace="ns",
    identity="me",
    name="lease",
    lease_duration=15.0,
    renew_deadline=10.0,
    retry_period=2.0,
)


class LeaseServer:
    """An in-memory Lease; records (method, virtual time) of every request; can refuse all."""

    def __init__(self, clock: FakeClock, holder: str | None = None) -> None:
        self.clock = clock
        self.requests: list[tuple[str, float]] = []
        self.refuse = False
        self.lease: dict[str, Any] | None = None
        if holder is not None:
            self.lease = {
                "metadata": {"name": CONFIG.name, "namespace": "ns", "resourceVersion": "1"},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
            }

    def times(self, method: str) -> list[float]:
        return [at for verb, at in self.requests if verb == method]

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.requests.append((method, self.clock.now()))
        if self.refuse:
            raise ConnectionResetError("refused")
        if method == "GET":
            if self.lease is None:
                raise NotFound(404, {})
            return dict(self.lease)
        self.lease = dict(kwargs["body"])
        return dict(self.lease)


def candidate(server: LeaseServer, clock: FakeClock, draws: RandomSource) -> LeaderElector:
    return LeaderElector(server, CONFIG, clock=clock, rng=draws)  # type: ignore[arg-type]


async def test_a_candidate_retries_with_jitter_and_takes_over_once_the_lease_expires(
    clock: FakeClock, draws: RandomSource
) -> None:
    server = LeaseServer(clock, holder="someone-else")  # who then never renews
    elector = candidate(server, clock, draws)
    acquiring = asyncio.create_task(elector.acquire())
    await clock.advance(14.9)
    assert not acquiring.done()
    # 2 s x (1 + 0.5 x 1.2) = 3.2 s between attempts
    assert server.times("GET") == pytest.approx([0.0, 3.2, 6.4, 9.6, 12.8])
    await clock.advance(1.2)
    assert acquiring.done()
    assert elector.is_leader
    # the first attempt after 15 s unchanged on our clock wins (written with a PUT)
    assert server.times("GET") == pytest.approx([0.0, 3.2, 6.4, 9.6, 12.8, 16.0])
    assert server.times("PUT") == pytest.approx([16.0])


async def test_the_leader_renews_every_retry_period(clock: FakeClock, draws: RandomSource) -> None:
    server = LeaseServer(clock)
    elector = candidate(server, clock, draws)
    await elector.acquire()
    renewing = asyncio.create_task(elector.renew_until_lost())
    await clock.advance(9)
    assert server.times("PUT") == pytest.approx([0.0, 2.0, 4.0, 6.0, 8.0])  # the fast path
    renewing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await renewing


async def test_leadership_is_lost_exactly_when_the_renew_deadline_passes(
    clock: FakeClock, draws: RandomSource
) -> None:
    server = LeaseServer(clock)
    elector = candidate(server, clock, draws)
    await elector.acquire()
    server.requests.clear()
    server.refuse = True
    renewing = asyncio.create_task(elector.renew_until_lost())
    await clock.advance(9.99)
    assert not renewing.done()
    assert elector.is_leader
    # each failed attempt is a fast-path PUT, then a GET; retried every retryPeriod
    assert server.times("PUT") == pytest.approx([0.0, 2.0, 4.0, 6.0, 8.0])
    assert server.times("GET") == pytest.approx([0.0, 2.0, 4.0, 6.0, 8.0])
    await clock.advance(0.01)
    assert renewing.done()
    with pytest.raises(LeadershipLost):
        renewing.result()
    assert not elector.is_leader


async def test_a_renewal_that_hangs_is_cut_off_at_the_renew_deadline(
    clock: FakeClock, draws: RandomSource
) -> None:
    server = LeaseServer(clock)
    elector = candidate(server, clock, draws)
    await elector.acquire()
    hung = asyncio.Event()

    async def hang(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        hung.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server.request = hang  # type: ignore[method-assign]
    renewing = asyncio.create_task(elector.renew_until_lost())
    await clock.advance(9.99)
    assert hung.is_set()
    assert not renewing.done()
    await clock.advance(0.01)
    assert renewing.done()
    with pytest.raises(LeadershipLost):
        renewing.result()
