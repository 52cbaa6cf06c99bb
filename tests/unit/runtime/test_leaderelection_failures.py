"""Leader election survives transient failures: one bad request is one failed attempt."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.http1client import TransportError
from jobset_controller.runtime.leaderelection import (
    JITTER_FACTOR,
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)


class FlakyLeaseClient:
    """An in-memory Lease behind the client calls the elector makes; can drop connections."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.failures_left = 0
        self.always_fail = False

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if self.always_fail or self.failures_left > 0:
            self.failures_left -= 1
            raise TransportError("connection closed")
        if method == "GET":
            if self.lease is None:
                from jobset_controller.runtime.client import NotFound

                raise NotFound(404, {})
            return dict(self.lease)
        self.version += 1
        body = dict(kwargs["body"])
        body["metadata"] = {**body.get("metadata", {}), "resourceVersion": str(self.version)}
        self.lease = body
        return dict(body)


def elector(client: FlakyLeaseClient, clock: FakeClock) -> LeaderElector:
    config = LeaderElectionConfig(
        namespace="ns",
        identity="me",
        name="lease",
        lease_duration=1.5,
        renew_deadline=1.0,
        retry_period=0.2,
    )
    return LeaderElector(client, config, clock=clock)  # type: ignore[arg-type]


async def test_a_dropped_connection_during_renewal_is_retried_not_fatal(clock: FakeClock) -> None:
    client = FlakyLeaseClient()
    leader = elector(client, clock)
    await leader.acquire()
    renewing = asyncio.create_task(leader.renew_until_lost())
    await clock.advance(0.3)  # renewed at 0 and 0.2
    client.failures_left = 2  # the fast path and the next GET fail, then it recovers
    renewed_before = client.version
    await clock.advance(1.2)  # past the 1 s renew deadline of the round that failed at 0.4
    assert client.failures_left <= 0  # both failures were met
    assert client.version > renewed_before  # and later renewals succeeded
    assert not renewing.done()
    assert leader.is_leader
    renewing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await renewing


async def test_renewal_failing_past_the_deadline_is_lost_leadership(clock: FakeClock) -> None:
    client = FlakyLeaseClient()
    leader = elector(client, clock)
    await leader.acquire()
    client.always_fail = True
    renewing = asyncio.create_task(leader.renew_until_lost())
    await clock.advance(0.99)
    assert not renewing.done()  # still within the renew deadline of 1 s
    assert leader.is_leader
    await clock.advance(0.01)
    assert renewing.done()
    with pytest.raises(LeadershipLost):
        renewing.result()
    assert not leader.is_leader


async def test_a_dropped_connection_while_standing_by_is_retried(clock: FakeClock) -> None:
    client = FlakyLeaseClient()
    client.failures_left = 3
    candidate = elector(client, clock)
    acquiring = asyncio.create_task(candidate.acquire())
    await clock.advance(3 * 0.2 * (1 + JITTER_FACTOR))  # three retries, at the largest jitter
    assert acquiring.done()
    acquiring.result()
    assert candidate.is_leader
    assert client.lease is not None
    assert client.lease["spec"]["holderIdentity"] == "me"


async def test_a_leader_whose_renewals_stalled_is_unhealthy() -> None:
    clock = FakeClock(start=100.0)
    client = FlakyLeaseClient()
    config = LeaderElectionConfig(
        namespace="ns",
        identity="me",
        name="lease",
        lease_duration=15.0,
        renew_deadline=10.0,
        retry_period=2.0,
    )
    leader = LeaderElector(client, config, clock=clock)  # type: ignore[arg-type]
    assert leader.healthy()  # standby: nothing to watch
    await leader.acquire()
    assert leader.healthy()
    await clock.advance(config.lease_duration + 19)
    assert leader.healthy()
    await clock.advance(2)  # no successful renewal for leaseDuration + 21 s
    assert not leader.healthy()
