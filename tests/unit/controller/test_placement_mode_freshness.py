"""The exclusive-placement mode is probed on demand, not on a timer: once at start, then only
when a pass is about to create Jobs the mode decides and the last probe is older than
`PROBE_PERIOD` (controller.placement_mode, docs/behaviour.md#placement-mode)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from tests.unit.controller.conftest import offline_controller

from jobset_controller.api import EXCLUSIVE_KEY, JOB_KEY, NODE_SELECTOR_STRATEGY_KEY, FeatureGates
from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_GATE, PLACEMENT_LABEL
from jobset_controller.controller.jobset import JobSetController
from jobset_controller.controller.placement_mode import (
    FALLBACK_MODE,
    INCONCLUSIVE_PERIOD,
    LEADER_FOLLOWER_MODE,
    PROBE_PERIOD,
    SETTLE_DELAYS,
    PlacementMode,
)
from jobset_controller.reconcile import Plan
from jobset_controller.runtime.client import ApiError
from jobset_controller.runtime.clock import FakeClock


class ProbeClient:
    """Answers the dry-run probe creates as an API server that calls our pod webhooks
    (`webhooks_called`) or does not; counts them, and the probes (each starts with the leader
    probe; the follower probe follows only a mutated leader); `hold` keeps them waiting."""

    def __init__(self, *, webhooks_called: bool) -> None:
        self.webhooks_called = webhooks_called
        self.unreachable = False  # the API server fails to call the webhook (no ready endpoint)
        self.dry_run_creates = 0
        self.probes = 0
        self.hold: asyncio.Event | None = None

    async def create(self, path: str, body: dict[str, Any], **params: Any) -> dict[str, Any]:
        assert params == {"dryRun": "All"}, "only the probe may create through this client"
        self.dry_run_creates += 1
        leader = body["metadata"]["name"].endswith("-0")
        self.probes += leader
        if self.hold is not None:
            await self.hold.wait()
        if self.unreachable:
            message = (
                'Internal error occurred: failed calling webhook "mpod.kb.io": failed to call '
                "webhook: connect: connection refused"
            )
            raise ApiError(500, {"reason": "InternalError", "message": message})
        reply: dict[str, Any] = {**body, "spec": dict(body["spec"])}
        if not self.webhooks_called:
            return reply
        if leader:  # the leader gets its affinity term
            own_job = body["metadata"]["labels"][JOB_KEY]
            term = {"labelSelector": {"matchExpressions": [{"key": JOB_KEY, "values": [own_job]}]}}
            reply["spec"]["affinity"] = {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            }
        else:  # the follower is gated
            reply["spec"]["schedulingGates"] = [{"name": PLACEMENT_GATE}]
        return reply


class RecordingExecutor:
    """Records each plan with the number of probes made before it was executed."""

    def __init__(self, client: ProbeClient) -> None:
        self.client = client
        self.executed: list[tuple[Plan, int]] = []

    async def execute(
        self, jobset: Any, plan: Plan, *, on_created: Callable[[str], None] = lambda name: None
    ) -> str | None:
        self.executed.append((plan, self.client.probes))
        return None


def placement_mode(client: ProbeClient, clock: FakeClock) -> PlacementMode:
    return PlacementMode(
        client,  # type: ignore[arg-type]  # only `create` is used
        "jobset-system",
        follower_mode="Reject",
        registry=CollectorRegistry(),
        clock=clock,
    )


def controller(mode: PlacementMode, executor: RecordingExecutor) -> JobSetController:
    return offline_controller(executor, placement_mode=mode)


def jobset(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "5",
            "annotations": annotations or {},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 2,
                    "template": {"spec": {"parallelism": 2, "template": {"spec": pod}}},
                }
            ]
        },
    }


EXCLUSIVE = {EXCLUSIVE_KEY: "rack"}


def placed_by_leader_and_followers(job: Any) -> bool:
    """True: leader/follower Job (label, no affinity); False: affinity in its template."""
    template = job["spec"]["template"]
    labelled = template["metadata"]["labels"].get(PLACEMENT_LABEL) == LEADER_FOLLOWER
    has_affinity = "affinity" in template["spec"]
    assert labelled != has_affinity, "a Job is placed one way or the other"
    return bool(labelled)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_an_idle_controller_never_probes_after_the_first_check(clock: FakeClock) -> None:
    client = ProbeClient(webhooks_called=True)
    mode = placement_mode(client, clock)
    assert await mode.check(first=True) is True
    assert (client.probes, client.dry_run_creates) == (1, 2)  # a leader and a follower probe
    await clock.advance(600.0)
    assert (client.probes, client.dry_run_creates) == (1, 2)
    assert clock.pending_sleepers == 0  # nothing waits on a timer to probe again
    assert mode.name == LEADER_FOLLOWER_MODE


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(True, False, id="webhooks-gone-exclusivity-falls-back-to-affinity"),
        pytest.param(False, True, id="webhooks-appeared-leader-and-followers"),
    ],
)
async def test_an_exclusive_jobset_after_the_probe_period_probes_once_before_its_jobs_are_built(
    clock: FakeClock, before: bool, after: bool
) -> None:
    client = ProbeClient(webhooks_called=before)
    mode = placement_mode(client, clock)
    executor = RecordingExecutor(client)
    ctl = controller(mode, executor)
    await mode.check(first=True)
    assert client.probes == 1
    client.webhooks_called = after  # the webhook configuration changed meanwhile
    await clock.advance(PROBE_PERIOD + 1.0)
    ctl.jobsets.store.put(jobset("excl", EXCLUSIVE))
    await ctl.reconcile("ns/excl")
    (plan, probed_before_execute), *_ = executor.executed
    assert probed_before_execute == 2  # exactly one more probe, before the Jobs were created
    assert len(plan.jobs_to_create) == 2
    assert all(placed_by_leader_and_followers(job) is after for job in plan.jobs_to_create)
    assert mode.pod_webhooks() is after
    # A second pass right away finds the mode fresh: no probe. (The recording executor reports
    # no Job created, so the pass does not wait for any.)
    await ctl.reconcile("ns/excl")
    assert client.probes == 2
    assert all(
        placed_by_leader_and_followers(job) is after
        for job in executor.executed[1][0].jobs_to_create
    )


async def test_an_exclusive_jobset_within_the_probe_period_uses_the_mode_without_probing(
    clock: FakeClock,
) -> None:
    client = ProbeClient(webhooks_called=True)
    mode = placement_mode(client, clock)
    executor = RecordingExecutor(client)
    ctl = controller(mode, executor)
    await mode.check(first=True)
    await clock.advance(PROBE_PERIOD - 1.0)
    ctl.jobsets.store.put(jobset("excl", EXCLUSIVE))
    await ctl.reconcile("ns/excl")
    assert client.probes == 1
    (plan, _), *_ = executor.executed
    assert all(placed_by_leader_and_followers(job) for job in plan.jobs_to_create)


async def test_concurrent_freshness_requests_share_one_probe(clock: FakeClock) -> None:
    client = ProbeClient(webhooks_called=False)
    mode = placement_mode(client, clock)
    await mode.check(first=True)
    await clock.advance(PROBE_PERIOD + 1.0)
    client.webhooks_called = True
    client.hold = asyncio.Event()
    waiting = [asyncio.create_task(mode.fresh()) for _ in range(3)]
    await clock.settle()
    assert client.probes == 2  # the start's, and the one under way (its leader probe waits)
    client.hold.set()
    assert await asyncio.gather(*waiting) == [True, True, True]
    assert client.probes == 2  # one probe for all three


async def test_concurrent_passes_of_exclusive_jobsets_share_one_probe(clock: FakeClock) -> None:
    client = ProbeClient(webhooks_called=True)
    mode = placement_mode(client, clock)
    executor = RecordingExecutor(client)
    ctl = controller(mode, executor)
    await mode.check(first=True)
    await clock.advance(PROBE_PERIOD + 1.0)
    client.hold = asyncio.Event()
    for name in ("a", "b"):
        ctl.jobsets.store.put(jobset(name, EXCLUSIVE))
    passes = [asyncio.create_task(ctl.reconcile(key)) for key in ("ns/a", "ns/b")]
    await clock.settle()
    assert executor.executed == []  # both wait for the probe before creating anything
    client.hold.set()
    await asyncio.gather(*passes)
    assert client.probes == 2
    assert len(executor.executed) == 2


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="no-exclusive-annotation"),
        pytest.param(
            {**EXCLUSIVE, NODE_SELECTOR_STRATEGY_KEY: "true"}, id="node-selector-strategy"
        ),
    ],
)
async def test_a_jobset_whose_jobs_the_mode_does_not_decide_never_probes(
    clock: FakeClock, annotations: dict[str, str]
) -> None:
    client = ProbeClient(webhooks_called=True)
    mode = placement_mode(client, clock)
    executor = RecordingExecutor(client)
    ctl = controller(mode, executor)
    await mode.check(first=True)
    ctl.jobsets.store.put(jobset("js", annotations))
    for _ in range(3):
        await clock.advance(10 * PROBE_PERIOD)
        await ctl.reconcile("ns/js")
    assert client.probes == 1
    assert len(executor.executed) == 3
    assert all(plan.jobs_to_create for plan, _ in executor.executed)  # Jobs were built each time
    assert not mode.is_fresh()


async def test_a_pass_that_creates_no_jobs_never_probes(clock: FakeClock) -> None:
    client = ProbeClient(webhooks_called=True)
    mode = placement_mode(client, clock)
    executor = RecordingExecutor(client)
    ctl = controller(mode, executor)
    await mode.check(first=True)
    ctl.jobsets.store.put(jobset("excl", EXCLUSIVE))
    await ctl.reconcile("ns/excl")  # fresh mode: builds the Jobs without a probe
    (plan, _), *_ = executor.executed
    for number, job in enumerate(plan.jobs_to_create):  # as the Job cache would show them
        metadata = {**job["metadata"], "uid": f"job-{number}", "resourceVersion": "7"}
        ctl.jobs.store.put({**job, "metadata": metadata, "status": {}})
    await clock.advance(10 * PROBE_PERIOD)
    await ctl.reconcile("ns/excl")
    assert not executor.executed[-1][0].jobs_to_create
    assert client.probes == 1


async def test_without_a_placement_mode_exclusive_jobs_get_affinity_and_nothing_probes() -> None:
    client = ProbeClient(webhooks_called=True)
    executor = RecordingExecutor(client)
    ctl = JobSetController(
        object(),  # type: ignore[arg-type]
        enqueue=lambda key: None,
        executor=executor,  # type: ignore[arg-type]
        recorder=object(),  # type: ignore[arg-type]
        features=FeatureGates(),
    )
    ctl.jobsets.store.put(jobset("excl", EXCLUSIVE))
    await ctl.reconcile("ns/excl")
    (plan, _), *_ = executor.executed
    assert not any(placed_by_leader_and_followers(job) for job in plan.jobs_to_create)
    assert client.dry_run_creates == 0


async def test_the_mode_gauge_follows_the_probe_that_fresh_runs(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    client = ProbeClient(webhooks_called=True)
    mode = PlacementMode(
        client,  # type: ignore[arg-type]
        "jobset-system",
        follower_mode="Gate",
        registry=registry,
        clock=clock,
    )
    await mode.check(first=True)

    def gauge(name: str) -> float | None:
        return registry.get_sample_value("jobset_exclusive_placement_mode", {"mode": name})

    assert (gauge(LEADER_FOLLOWER_MODE), gauge(FALLBACK_MODE)) == (1.0, 0.0)
    client.webhooks_called = False
    assert await mode.fresh() is True  # still fresh: no probe, the old answer
    await clock.advance(PROBE_PERIOD + 1.0)
    assert await mode.fresh() is False
    assert (gauge(LEADER_FOLLOWER_MODE), gauge(FALLBACK_MODE)) == (0.0, 1.0)
    assert client.probes == 2


async def test_a_controller_that_starts_in_the_fallback_mode_looks_again_for_thirty_seconds(
    clock: FakeClock,
) -> None:
    """Install time: the webhook configuration reaches the API server after the first probe.
    The settle probes find it; after the settle period nothing probes on a timer."""
    client = ProbeClient(webhooks_called=False)
    mode = placement_mode(client, clock)
    assert await mode.check(first=True) is False
    settling = asyncio.create_task(mode.settle())
    await clock.advance(SETTLE_DELAYS[0] + SETTLE_DELAYS[1])
    assert client.probes == 3
    client.webhooks_called = True  # the caBundle arrived
    await clock.advance(SETTLE_DELAYS[2])
    assert client.probes == 4
    assert mode.name == LEADER_FOLLOWER_MODE
    await clock.advance(600.0)
    assert settling.done()
    assert client.probes == 4


async def test_settling_ends_after_its_delays_when_the_webhooks_never_come(
    clock: FakeClock,
) -> None:
    client = ProbeClient(webhooks_called=False)
    mode = placement_mode(client, clock)
    await mode.check(first=True)
    settling = asyncio.create_task(mode.settle())
    await clock.advance(sum(SETTLE_DELAYS))
    assert settling.done()
    assert client.probes == 1 + len(SETTLE_DELAYS)
    await clock.advance(600.0)
    assert client.probes == 1 + len(SETTLE_DELAYS)
    assert clock.pending_sleepers == 0


async def test_a_controller_that_starts_in_leader_follower_mode_does_not_settle(
    clock: FakeClock,
) -> None:
    client = ProbeClient(webhooks_called=True)
    mode = placement_mode(client, clock)
    await mode.check(first=True)
    await mode.settle()
    assert client.probes == 1


async def test_a_probe_the_api_server_could_not_deliver_holds_only_briefly(
    clock: FakeClock,
) -> None:
    """At start the webhook Service has no ready endpoint (this pod is not Ready yet): the API
    server fails to call the webhook. That is no answer, so the fallback it gives stands for
    INCONCLUSIVE_PERIOD, not PROBE_PERIOD: the first exclusive JobSet after the pod turns Ready
    probes again and gets leader/follower Jobs."""
    client = ProbeClient(webhooks_called=True)
    client.unreachable = True
    mode = placement_mode(client, clock)
    assert await mode.check(first=True) is False
    assert mode.is_fresh()
    client.unreachable = False  # the pod turned Ready, the Service has its endpoint
    await clock.advance(INCONCLUSIVE_PERIOD + 0.5)
    assert not mode.is_fresh()
    assert await mode.fresh() is True
    assert client.probes == 2
    assert mode.name == LEADER_FOLLOWER_MODE


async def test_a_clear_no_from_the_api_server_holds_for_the_probe_period(
    clock: FakeClock,
) -> None:
    """A webhook configuration that does not route pods to us is an answer: no probe again
    before PROBE_PERIOD, however many exclusive JobSets come."""
    client = ProbeClient(webhooks_called=False)
    mode = placement_mode(client, clock)
    assert await mode.check(first=True) is False
    await clock.advance(INCONCLUSIVE_PERIOD + 0.5)
    assert mode.is_fresh()
    assert await mode.fresh() is False
    assert client.probes == 1
