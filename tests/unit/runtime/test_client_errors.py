"""The API client's boundary rules: status -> exception, and which answers are retried."""

from __future__ import annotations

import pytest

from jobset_controller.runtime import client
from jobset_controller.runtime.client import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    error_for,
)


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (403, "Forbidden", Forbidden),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (400, "BadRequest", ApiError),
    ],
)
def test_status_maps_to_one_exception_type(status: int, reason: str, kind: type) -> None:
    error = error_for(status, {"reason": reason, "message": "m"}, "GET", "/x")
    assert type(error) is kind
    assert error.status == status
    assert error.message == "m"


def test_already_exists_is_a_conflict_so_callers_can_catch_either() -> None:
    assert isinstance(error_for(409, {"reason": "AlreadyExists"}), Conflict)


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [
        (429, "2", 2.0),
        (503, "1", 1.0),
        (504, "0", 0.0),
        (500, None, None),  # no Retry-After: a server error is final, like client-go
        (409, "1", None),  # Retry-After on a conflict is not a reason to retry the same write
        (422, None, None),
        (429, "3600", 30.0),  # capped
    ],
)
def test_retry_delay_honours_retry_after(
    status: int, retry_after: str | None, expected: float | None
) -> None:
    assert client._retry_delay(status, retry_after, attempt=0) == expected


def test_too_many_requests_without_retry_after_backs_off_growing() -> None:
    delays = [client._retry_delay(429, None, attempt) for attempt in range(4)]
    assert all(d is not None and d > 0 for d in delays)
    lower_bounds = [min(0.1 * 2**a, 5.0) for a in range(4)]
    assert all(d is not None and d >= low for d, low in zip(delays, lower_bounds, strict=True))


def test_query_booleans_are_lowercase_like_go() -> None:
    assert client._query_value(True) == "true"
    assert client._query_value(False) == "false"
    assert client._query_value(300) == "300"


def test_a_loopback_api_server_is_never_proxied(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobset_controller.runtime.client import _env_proxy

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    for server in ("https://127.0.0.1:6443", "https://localhost:6443", "https://[::1]:6443"):
        assert _env_proxy(server) == (None, None), server
    proxy, _ = _env_proxy("https://apiserver.invalid:6443")
    assert str(proxy) == "http://proxy.invalid:3128"
