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


def test_a_status_causes_type_is_read_from_its_reason_field_as_the_api_server_writes_it() -> None:
    # The answer of kube-apiserver v1.37 to a Job create in a namespace being deleted, as sent.
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'jobs.batch "js-workers-1" is forbidden: unable to create new content in '
        "namespace test-1 because it is being terminated",
        "reason": "Forbidden",
        "details": {
            "name": "js-workers-1",
            "group": "batch",
            "kind": "jobs",
            "causes": [
                {
                    "reason": "NamespaceTerminating",
                    "message": "namespace test-1 is being terminated",
                    "field": "metadata.namespace",
                }
            ],
        },
        "code": 403,
    }
    error = error_for(403, body)
    assert error.has_cause(client.NAMESPACE_TERMINATING)
    assert not error.has_cause("FieldValueInvalid")
    assert not error_for(403, {"reason": "Forbidden"}).has_cause(client.NAMESPACE_TERMINATING)


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


def test_a_loopback_api_server_is_never_proxied() -> None:
    env = {"HTTPS_PROXY": "http://proxy.invalid:3128"}
    for server in ("https://127.0.0.1:6443", "https://localhost:6443", "https://[::1]:6443"):
        assert client.env_proxy(server, env) is None, server
    assert client.env_proxy("https://apiserver.invalid:6443", env) == "http://proxy.invalid:3128"


def test_the_proxy_variable_follows_the_server_scheme_upper_case_first() -> None:
    env = {"HTTPS_PROXY": "http://s:1", "https_proxy": "http://lower:1", "http_proxy": "p:2"}
    assert client.env_proxy("https://api.test", env) == "http://s:1"
    assert client.env_proxy("http://api.test", env) == "http://p:2"  # no scheme: http://


@pytest.mark.parametrize(
    ("no_proxy", "server", "bypassed"),
    [
        ("*", "https://api.test:6443", True),
        ("api.test", "https://api.test:6443", True),
        ("test", "https://api.test:6443", True),  # a domain covers its subdomains
        (".test", "https://api.test:6443", True),
        (".api.test", "https://api.test:6443", False),  # a leading dot: subdomains only
        ("*.test", "https://api.test:6443", True),
        ("pi.test", "https://api.test:6443", False),  # not a suffix on a label boundary
        ("api.test:6443", "https://api.test:6443", True),
        ("api.test:443", "https://api.test:6443", False),
        ("10.0.0.0/8", "https://10.1.2.3:6443", True),
        ("10.0.0.0/8", "https://11.1.2.3:6443", False),
        ("10.1.2.3", "https://10.1.2.3", True),
        ("[fd00::1]:443", "https://[fd00::1]", True),
        (" other.test , API.test ", "https://api.test", True),
        ("fd00:0::1", "https://[fd00::1]", True),  # IPs compare by value
        ("1.2.3", "https://10.1.2.3", False),  # a name never matches an IP host
        ("api.test:", "https://api.test:6443", True),  # an empty port: any port
        ("", "https://api.test", False),
    ],
)
def test_no_proxy_entries_match_like_go(no_proxy: str, server: str, bypassed: bool) -> None:
    env = {"HTTPS_PROXY": "http://proxy.invalid:3128", "NO_PROXY": no_proxy}
    assert (client.env_proxy(server, env) is None) is bypassed
