"""Lease leader election against a real apiserver, with short timings (lease 3 s)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
)
from jobset_controller_dev.envtest.polling import eventually, scaled

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5


class CountingElector(LeaderElector):
    """A candidate that records each finished attempt as (monotonic start, won), so a test waits
    for the attempts it reasons about instead of sleeping."""

    def __init__(self, kube: KubeClient, config: LeaderElectionConfig) -> None:
        super().__init__(kube, config)
        self.attempts: list[tuple[float, bool]] = []

    async def try_acquire_or_renew(self) -> bool:
        started = time.monotonic()
        won = await super().try_acquire_or_renew()
        self.attempts.append((started, won))
        return won

    def lost_since(self, moment: float) -> int:
        """Attempts started after ``moment`` that did not get the Lease."""
        return sum(1 for started, won in self.attempts if started > moment and not won)


def elector(kube: KubeClient, namespace: str, identity: str) -> CountingElector:
    config = LeaderElectionConfig(
        namespace=namespace,
        identity=identity,
        name="test-lease",
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
    )
    return CountingElector(kube, config)


async def lease_holder(kube: KubeClient, namespace: str) -> str:
    lease = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/test-lease")
    return str(lease["spec"].get("holderIdentity") or "")


async def lead(candidate: LeaderElector) -> None:
    await candidate.acquire()
    await candidate.renew_until_lost()


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
        await task


async def test_exactly_one_candidate_holds_the_lease(kube: KubeClient, namespace: str) -> None:
    a, b = elector(kube, namespace, "a"), elector(kube, namespace, "b")
    tasks = [asyncio.create_task(lead(a)), asyncio.create_task(lead(b))]
    try:
        await eventually(lambda: a.is_leader or b.is_leader, "a leader", 30)
        won_at = time.monotonic()
        winner, loser = (a, b) if a.is_leader else (b, a)
        # The loser keeps trying; wait for an attempt of its that started more than a lease
        # duration after the win (so an unrenewed Lease would have run out) and failed.
        await eventually(
            lambda: loser.lost_since(won_at + LEASE) >= 1,
            "the loser's attempt a lease duration after the win",
            30,
        )
        assert [a.is_leader, b.is_leader].count(True) == 1
        assert winner.is_leader
        assert await lease_holder(kube, namespace) == winner.config.identity
    finally:
        for task in tasks:
            await stop(task)


@pytest.mark.parametrize("graceful", [False, True], ids=["crash", "release"])
async def test_standby_takes_over_when_the_leader_goes_away(
    kube: KubeClient, namespace: str, graceful: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    first = elector(kube, namespace, "first")
    await first.acquire()
    renewing = asyncio.create_task(first.renew_until_lost())
    second = elector(kube, namespace, "second")
    standby = asyncio.create_task(second.acquire())
    # Three failed attempts while the first renews: the standby has tried, and not taken over.
    await eventually(lambda: second.lost_since(0.0) >= 3, "three attempts of the standby", 30)
    assert not standby.done()
    await stop(renewing)
    if graceful:
        await first.release()
    gone = time.monotonic()
    # A generous wait: the bound asserted below decides, and a slow takeover shows its figure.
    try:
        await asyncio.wait_for(standby, scaled(30))
    except TimeoutError:
        holder = await lease_holder(kube, namespace)
        raise AssertionError(
            f"the standby did not take over within {scaled(30):g} s (Lease held by {holder!r})"
        ) from None
    took = time.monotonic() - gone
    with capsys.disabled():
        print(f"\n  takeover after {'release' if graceful else 'crash'}: {took:.2f} s")
    assert second.is_leader
    assert await lease_holder(kube, namespace) == "second"
    # client-go's bounds plus slack for a loaded 2-core machine (the figure is printed above),
    # scaled as every wait: wall time on a slower machine.
    bound = RETRY * 2.2 + 4.0 if graceful else LEASE + RETRY * 2.2 + 4.0
    assert took <= scaled(bound)
    lease = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/test-lease")
    assert lease["spec"]["leaseTransitions"] == 1


async def test_leader_that_cannot_renew_reports_loss(kube: KubeClient, namespace: str) -> None:
    leader = elector(kube, namespace, "leader")
    await leader.acquire()
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/test-lease"
    # Someone else takes the lease by force (as an operator editing it would).
    await kube.merge_patch(
        path, {"spec": {"holderIdentity": "usurper", "leaseDurationSeconds": 60}}
    )
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(leader.renew_until_lost(), scaled(RENEW + RETRY * 4 + 2))
    assert not leader.is_leader


def test_invalid_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="leaseDuration must be greater than renewDeadline"):
        LeaderElectionConfig(
            namespace="x",
            identity="y",
            name="l",
            lease_duration=5,
            renew_deadline=5,
            retry_period=2,
        ).validate()
    with pytest.raises(ValueError, match="renewDeadline must be greater than retryPeriod"):
        LeaderElectionConfig(
            namespace="x",
            identity="y",
            name="l",
            lease_duration=15,
            renew_deadline=2,
            retry_period=2,
        ).validate()
