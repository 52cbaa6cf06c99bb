"""The client's waits on virtual time (draws fixed at 0.5, conftest): a throttled or unavailable
answer with Retry-After is retried exactly that many seconds later; a 429 without it and a
dropped connection on a read back off 0.1 s x 2^n x (1 + draw); writes are not retried after a
dropped connection (the server may have applied them)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from jobset_controller.runtime.client import (
    ClientSettings,
    KubeClient,
    ServerError,
)
from jobset_controller.runtime.clock import FakeClock, RandomSource
from jobset_controller.runtime.http1client import Response, TransportError
from jobset_controller.runtime.kubeconfig import NoCredentials
from jobset_controller.runtime.ratelimit import TokenBucket

Answer = tuple[int, dict[str, str]] | Exception


class ScriptedTransport:
    """Stands in for the connection pool: answers from a script, records when each came."""

    def __init__(self, clock: FakeClock, answers: list[Answer]) -> None:
        self.clock, self.answers = clock, answers
        self.times: list[float] = []

    async def request(
        self, method: str, target: str, headers: str, body: bytes | None, **kwargs: Any
    ) -> Response:
        self.times.append(self.clock.now())
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, answer_headers = answer
        body = orjson.dumps({"kind": "Status", "code": status} if status >= 400 else {})
        return Response(status, {k.lower(): v for k, v in answer_headers.items()}, body)


def client_for(
    session: ScriptedTransport,
    clock: FakeClock,
    draws: RandomSource,
    bucket: TokenBucket | None = None,
) -> KubeClient:
    return KubeClient(
        server="https://api.test",
        transport=session,  # type: ignore[arg-type]
        credentials=NoCredentials(),
        settings=ClientSettings(),
        metrics=None,
        bucket=bucket or TokenBucket(qps=500, burst=500, clock=clock),
        clock=clock,
        rng=draws,
    )


async def calls_at(
    answers: list[Answer], clock: FakeClock, draws: RandomSource, method: str = "GET"
) -> tuple[list[float], asyncio.Task[dict[str, Any]]]:
    session = ScriptedTransport(clock, answers)
    task = asyncio.create_task(client_for(session, clock, draws).request(method, "/api/v1/pods"))
    await clock.advance(100)
    return session.times, task


@pytest.mark.parametrize("status", [429, 503])
async def test_an_answer_with_retry_after_is_retried_after_exactly_that_wait(
    clock: FakeClock, draws: RandomSource, status: int
) -> None:
    session = ScriptedTransport(clock, [(status, {"Retry-After": "3"}), (200, {})])
    task = asyncio.create_task(client_for(session, clock, draws).get("/api/v1/pods"))
    await clock.advance(2.99)
    assert session.times == [0.0]
    assert not task.done()
    await clock.advance(0.01)
    assert session.times == [0.0, 3.0]
    assert task.done()
    assert task.result() == {}


async def test_retry_after_is_capped_at_30_seconds(clock: FakeClock, draws: RandomSource) -> None:
    times, task = await calls_at([(429, {"Retry-After": "3600"}), (200, {})], clock, draws)
    assert times == [0.0, 30.0]
    assert task.result() == {}


async def test_throttling_without_retry_after_backs_off_with_jitter(
    clock: FakeClock, draws: RandomSource
) -> None:
    times, task = await calls_at([(429, {}), (429, {}), (200, {})], clock, draws)
    # 0.1 s x 1.5, then 0.2 s x 1.5
    assert times == pytest.approx([0.0, 0.15, 0.45])
    assert task.result() == {}


async def test_a_dropped_connection_on_a_read_is_retried_after_a_backoff(
    clock: FakeClock, draws: RandomSource
) -> None:
    dropped = TransportError("connection closed")
    times, task = await calls_at([dropped, dropped, (200, {})], clock, draws)
    assert times == pytest.approx([0.0, 0.15, 0.45])
    assert task.result() == {}


async def test_a_dropped_connection_on_a_write_is_not_retried(
    clock: FakeClock, draws: RandomSource
) -> None:
    times, task = await calls_at([TransportError("connection closed")], clock, draws, "POST")
    assert times == [0.0]
    with pytest.raises(TransportError):
        task.result()


async def test_a_server_error_without_retry_after_is_final_at_once(
    clock: FakeClock, draws: RandomSource
) -> None:
    times, task = await calls_at([(500, {})], clock, draws)
    assert times == [0.0]
    with pytest.raises(ServerError):
        task.result()


async def test_without_a_client_side_limit_no_request_waits(
    clock: FakeClock, draws: RandomSource
) -> None:
    """A negative --kube-api-qps (client_throttle -> None): three requests at once, none
    waiting; a client with a bucket of burst 1 beside it still spaces its two."""
    session = ScriptedTransport(clock, [(200, {})] * 5)
    limited = client_for(session, clock, draws, bucket=TokenBucket(qps=1, burst=1, clock=clock))
    unlimited = KubeClient(
        server="https://api.test",
        transport=session,  # type: ignore[arg-type]
        credentials=NoCredentials(),
        settings=ClientSettings(qps=-1),
        metrics=None,
        bucket=None,
        clock=clock,
        rng=draws,
    )
    await asyncio.gather(*(unlimited.get("/api/v1/pods") for _ in range(3)))
    assert session.times == [0.0, 0.0, 0.0]
    both = asyncio.gather(*(limited.get("/api/v1/pods") for _ in range(2)))
    await clock.advance(10)
    await both
    assert session.times == [0.0, 0.0, 0.0, 0.0, 1.0]  # the limited one still spaces them


async def test_a_client_with_its_own_budget_neither_waits_for_nor_spends_the_originals(
    clock: FakeClock, draws: RandomSource
) -> None:
    """The event recorders' client (`with_own_budget`): the same connections and limits, a
    bucket of its own. Both at QPS 1, burst 1: one request each goes at once, whoever spent
    the other bucket's token."""
    session = ScriptedTransport(clock, [(200, {})] * 4)
    main = KubeClient(
        server="https://api.test",
        transport=session,  # type: ignore[arg-type]
        credentials=NoCredentials(),
        settings=ClientSettings(qps=1, burst=1),
        metrics=None,
        bucket=TokenBucket(qps=1, burst=1, clock=clock),
        clock=clock,
        rng=draws,
    )
    events = main.with_own_budget()
    await main.get("/api/v1/pods")
    await events.get("/api/v1/pods")
    assert session.times == [0.0, 0.0]  # the events' request did not wait for main's token
    both = asyncio.gather(main.get("/api/v1/pods"), events.get("/api/v1/pods"))
    await clock.advance(10)
    await both
    assert session.times == [0.0, 0.0, 1.0, 1.0]  # each bucket spaces its own, at its QPS
