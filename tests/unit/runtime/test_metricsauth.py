"""Who may read /metrics: TokenReview then SubjectAccessReview, with a stub API and a fake clock."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import structlog

from jobset_controller.runtime.client import ServerError
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.logging import configure_logging
from jobset_controller.runtime.metricsauth import DelegatingAuth, bearer_token
from jobset_controller.runtime.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

TOKEN = "s3cr3t-token-value"


class StubApi:
    """Answers reviews like an API server where `readers` may get /metrics."""

    def __init__(self, users: dict[str, str], readers: set[str]) -> None:
        self.users, self.readers = users, readers
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: Exception | None = None
        self.delay = 0.0
        self.gate: asyncio.Event | None = None  # when set, every review waits for it to open
        self.in_flight = self.most_in_flight = 0

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append((path, dict(body)))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)  # never reached: the fake clock times it out
            if self.gate is not None:
                await self.gate.wait()
        finally:
            self.in_flight -= 1
        if self.fail is not None:
            raise self.fail
        if path == TOKEN_REVIEWS.path():
            user = self.users.get(body["spec"]["token"])
            if user is None:
                return {"status": {"authenticated": False}}
            return {
                "status": {
                    "authenticated": True,
                    "user": {"username": user, "uid": "u1", "groups": ["g"]},
                }
            }
        assert path == SUBJECT_ACCESS_REVIEWS.path()
        spec = body["spec"]
        allowed = spec["user"] in self.readers and spec["nonResourceAttributes"] == {
            "path": "/metrics",
            "verb": "get",
        }
        return {"status": {"allowed": allowed}}


@pytest.fixture
def api() -> StubApi:
    return StubApi({TOKEN: "system:serviceaccount:mon:prometheus", "other": "bob"}, set())


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
    ],
)
def test_only_a_bearer_token_is_read(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


async def test_no_token_is_401_without_asking_the_api(api: StubApi) -> None:
    auth = DelegatingAuth(api.create, clock=FakeClock())
    decision = await auth.decide(None, "GET", "/metrics")
    assert (decision.status, decision.message) == (401, "Unauthorized")
    assert api.calls == []


async def test_an_unknown_token_is_401(api: StubApi) -> None:
    auth = DelegatingAuth(api.create, clock=FakeClock())
    assert (await auth.decide("Bearer forged", "GET", "/metrics")).status == 401
    assert [path for path, _ in api.calls] == [TOKEN_REVIEWS.path()]


async def test_a_user_without_the_role_is_403_naming_the_user(api: StubApi) -> None:
    auth = DelegatingAuth(api.create, clock=FakeClock())
    decision = await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")
    assert decision.status == 403
    assert decision.message == (
        "Authorization denied for user system:serviceaccount:mon:prometheus"
    )
    review = api.calls[1][1]["spec"]
    assert review == {
        "user": "system:serviceaccount:mon:prometheus",
        "groups": ["g"],
        "uid": "u1",
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


def paths(api: StubApi) -> list[str]:
    return ["token" if path == TOKEN_REVIEWS.path() else "access" for path, _ in api.calls]


async def test_an_allowed_reader_is_remembered_minutes_as_the_api_server_does(
    api: StubApi,
) -> None:
    """The token's identity for 2 min, its access for 5 min (kube-apiserver's defaults)."""
    clock = FakeClock()
    api.readers.add("system:serviceaccount:mon:prometheus")
    auth = DelegatingAuth(api.create, clock=clock)
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed
    await clock.advance(119.0)
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed
    assert paths(api) == ["token", "access"]
    await clock.advance(2.0)  # 121 s: the identity is asked again, the access still remembered
    api.readers.clear()  # revoked
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed
    assert paths(api) == ["token", "access", "token"]
    await clock.advance(180.0)  # 301 s: the revocation is seen
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).status == 403
    assert paths(api) == ["token", "access", "token", "token", "access"]


async def test_refusals_are_remembered_seconds(api: StubApi) -> None:
    """Not authenticated, or denied: 30 s each, then asked again (a grant is seen soon)."""
    clock = FakeClock()
    auth = DelegatingAuth(api.create, clock=clock)
    assert (await auth.decide("Bearer forged", "GET", "/metrics")).status == 401
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).status == 403
    await clock.advance(29.0)
    assert (await auth.decide("Bearer forged", "GET", "/metrics")).status == 401
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).status == 403
    assert paths(api) == ["token", "token", "access"]
    api.readers.add("system:serviceaccount:mon:prometheus")
    await clock.advance(2.0)
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed
    assert (await auth.decide("Bearer forged", "GET", "/metrics")).status == 401
    assert paths(api) == ["token", "token", "access", "access", "token"]


async def test_the_same_identity_with_a_new_token_reuses_the_remembered_access(
    api: StubApi,
) -> None:
    api.users["rotated"] = "system:serviceaccount:mon:prometheus"
    api.readers.add("system:serviceaccount:mon:prometheus")
    auth = DelegatingAuth(api.create, clock=FakeClock())
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed
    assert (await auth.decide("Bearer rotated", "GET", "/metrics")).allowed
    assert paths(api) == ["token", "access", "token"]


async def test_a_flood_of_random_tokens_keeps_a_few_reviews_in_flight(api: StubApi) -> None:
    """300 requests with 300 new tokens at once: 4 reviews at a time, the rest wait; all are
    answered once the API server answers."""
    api.gate = asyncio.Event()
    clock = FakeClock()
    auth = DelegatingAuth(api.create, clock=clock, max_in_flight=4)
    requests = [
        asyncio.create_task(auth.decide(f"Bearer random-{n}", "GET", "/metrics"))
        for n in range(300)
    ]
    await clock.settle()
    assert api.in_flight == 4
    assert len(api.calls) == 4
    api.gate.set()
    decisions = await asyncio.gather(*requests)
    assert {decision.status for decision in decisions} == {401}
    assert api.most_in_flight == 4
    assert len(api.calls) == 300


async def test_concurrent_requests_with_one_token_share_one_review(api: StubApi) -> None:
    api.gate = asyncio.Event()
    api.readers.add("system:serviceaccount:mon:prometheus")
    clock = FakeClock()
    auth = DelegatingAuth(api.create, clock=clock)
    requests = [
        asyncio.create_task(auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")) for _ in range(50)
    ]
    await clock.settle()
    requests[0].cancel()  # the first asker's client left: the shared review goes on
    api.gate.set()
    decisions = await asyncio.gather(*requests[1:])
    assert all(decision.allowed for decision in decisions)
    assert paths(api) == ["token", "access"]


async def test_waiting_for_a_review_slot_is_bounded_by_the_timeout(api: StubApi) -> None:
    api.gate = asyncio.Event()
    clock = FakeClock()
    auth = DelegatingAuth(api.create, clock=clock, max_in_flight=1, timeout=10.0)
    first = asyncio.create_task(auth.decide("Bearer a", "GET", "/metrics"))
    await clock.settle()
    second = asyncio.create_task(auth.decide("Bearer b", "GET", "/metrics"))
    await clock.settle()
    assert len(api.calls) == 1  # b waits for the slot
    await clock.advance(10.0)
    for decision in await asyncio.gather(first, second):
        assert decision.status == 500
        assert "no answer within 10 s" in decision.message
    assert api.in_flight == 0


async def test_tokens_are_remembered_apart(api: StubApi) -> None:
    api.readers.add("system:serviceaccount:mon:prometheus")
    auth = DelegatingAuth(api.create, clock=FakeClock())
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed
    assert (await auth.decide("Bearer other", "GET", "/metrics")).status == 403


async def test_an_api_failure_is_500_and_not_remembered(api: StubApi) -> None:
    api.readers.add("system:serviceaccount:mon:prometheus")
    auth = DelegatingAuth(api.create, clock=FakeClock())
    api.fail = ServerError(503, {"reason": "ServiceUnavailable"}, "POST", TOKEN_REVIEWS.path())
    decision = await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")
    assert decision.status == 500
    assert decision.message.startswith("Authentication failed")
    api.fail = None
    assert (await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).allowed


async def test_a_review_without_an_answer_times_out_as_500(api: StubApi) -> None:
    clock = FakeClock()
    api.delay = 3600.0
    auth = DelegatingAuth(api.create, clock=clock, timeout=10.0)
    pending = asyncio.create_task(auth.decide(f"Bearer {TOKEN}", "GET", "/metrics"))
    await clock.settle()
    await clock.advance(10.0)
    decision = await asyncio.wait_for(pending, 1)
    assert decision.status == 500
    assert "no answer within 10 s" in decision.message


async def test_remembered_decisions_are_bounded(api: StubApi) -> None:
    auth = DelegatingAuth(api.create, clock=FakeClock(), max_entries=3)
    for number in range(10):
        await auth.decide(f"Bearer random-{number}", "GET", "/metrics")
    assert len(auth._tokens) == 3


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream)
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


async def test_the_token_never_reaches_a_log_line_or_a_refusal(
    api: StubApi, log_stream: io.StringIO
) -> None:
    auth = DelegatingAuth(api.create, clock=FakeClock())
    messages = [(await auth.decide(f"Bearer {TOKEN}", "GET", "/metrics")).message]
    api.fail = ServerError(500, {"message": "boom"}, "POST", TOKEN_REVIEWS.path())
    messages.append((await auth.decide("Bearer another-secret", "GET", "/metrics")).message)
    api.fail = OSError(f"connection reset while sending {TOKEN}")
    messages.append((await auth.decide("Bearer third-secret", "GET", "/metrics")).message)
    text = log_stream.getvalue() + "\n".join(messages)
    assert "metrics request denied" in text  # the log was written...
    for secret in (TOKEN, "another-secret", "third-secret"):
        assert secret not in text  # ...without any token in it
    assert all(TOKEN not in str(key) for key in auth._tokens.remembered_keys())
    assert all(TOKEN not in str(key) for key in auth._access.remembered_keys())
