"""Metrics and health servers, started on 127.0.0.1 port 0 and queried over real HTTP."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator

import aiohttp
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry, Counter

from jobset_controller.runtime.metrics_and_health import (
    HealthServer,
    MetricsServer,
    parse_bind_address,
)
from jobset_controller.runtime.metricsauth import Decision
from jobset_controller.runtime.servingtls import self_signed_context, self_signed_pem


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(http: aiohttp.ClientSession, port: int | None, path: str) -> tuple[int, str, str]:
    assert port is not None
    async with http.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text(), response.headers.get("Content-Type", "")


@pytest.fixture
async def health() -> AsyncIterator[HealthServer]:
    server = HealthServer("127.0.0.1:0")
    await server.start()
    yield server
    await server.stop()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param(":8081", (None, 8081), id="all interfaces"),
        pytest.param("127.0.0.1:0", ("127.0.0.1", 0), id="host and free port"),
        pytest.param("[::1]:8443", ("::1", 8443), id="bracketed IPv6"),
        pytest.param("0", None, id="zero disables"),
        pytest.param("", None, id="empty disables"),
    ],
)
def test_bind_address_uses_go_syntax(address: str, expected: tuple[str | None, int] | None) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize("address", ["8080", "host:", "host:http", ":70000"])
def test_malformed_bind_address_is_rejected(address: str) -> None:
    with pytest.raises(ValueError, match="invalid bind address"):
        parse_bind_address(address)


async def test_metrics_endpoint_serves_the_given_registry_in_text_format(
    http: aiohttp.ClientSession,
) -> None:
    registry = CollectorRegistry()
    Counter("demo_reconciles", "Reconciles done.", registry=registry).inc(3)
    server = MetricsServer(registry, "127.0.0.1:0")
    await server.start()
    try:
        status, body, content_type = await get(http, server.port, "/metrics")
    finally:
        await server.stop()

    assert status == 200
    assert content_type.startswith("text/plain")
    assert "demo_reconciles_total 3.0" in body


async def test_readyz_fails_until_every_readiness_check_passes(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    synced = False
    health.add_readiness_check("ping", lambda: True)
    health.add_readiness_check("informers-synced", lambda: synced)

    status, body, _ = await get(http, health.port, "/readyz")
    assert status == 500
    assert "[-]informers-synced failed" in body
    assert "[+]ping ok" in body

    synced = True
    assert (await get(http, health.port, "/readyz"))[:2] == (200, "ok")


async def test_healthz_is_ok_when_liveness_checks_pass(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    health.add_liveness_check("ping", lambda: True)

    assert (await get(http, health.port, "/healthz"))[:2] == (200, "ok")


async def test_endpoint_with_no_checks_is_healthy(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    assert (await get(http, health.port, "/healthz"))[0] == 200
    assert (await get(http, health.port, "/readyz"))[0] == 200


async def test_a_check_that_raises_counts_as_failed_without_serving_the_error(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    def broken() -> bool:
        raise RuntimeError("secret detail")

    health.add_liveness_check("broken", broken)

    status, body, _ = await get(http, health.port, "/healthz")
    assert status == 500
    assert "[-]broken failed" in body
    assert "secret detail" not in body


async def test_liveness_and_readiness_checks_are_separate(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    health.add_readiness_check("never-ready", lambda: False)

    assert (await get(http, health.port, "/healthz"))[0] == 200
    assert (await get(http, health.port, "/readyz"))[0] == 500


async def test_one_check_can_be_queried_by_name(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    health.add_readiness_check("good", lambda: True)
    health.add_readiness_check("bad", lambda: False)

    assert (await get(http, health.port, "/readyz/good"))[0] == 200
    assert (await get(http, health.port, "/readyz/bad"))[0] == 500
    assert (await get(http, health.port, "/readyz/unknown"))[0] == 404


async def test_verbose_lists_every_check_on_success(
    health: HealthServer, http: aiohttp.ClientSession
) -> None:
    health.add_liveness_check("ping", lambda: True)

    status, body, _ = await get(http, health.port, "/healthz?verbose")
    assert status == 200
    assert "[+]ping ok" in body


async def test_endpoint_names_are_configurable(http: aiohttp.ClientSession) -> None:
    server = HealthServer(
        "127.0.0.1:0", readiness_endpoint_name="ready", liveness_endpoint_name="live"
    )
    server.add_readiness_check("never", lambda: False)
    await server.start()
    try:
        assert (await get(http, server.port, "/live"))[0] == 200
        assert (await get(http, server.port, "/ready"))[0] == 500
        assert (await get(http, server.port, "/readyz"))[0] == 404
        assert (await get(http, server.port, "/healthz"))[0] == 404
    finally:
        await server.stop()


@pytest.mark.parametrize("address", ["0", ""])
async def test_disabled_servers_do_not_listen(address: str) -> None:
    metrics = MetricsServer(CollectorRegistry(), address)
    health = HealthServer(address)
    for server in (metrics, health):
        assert not server.enabled
        await server.start()
        assert server.port is None
        await server.stop()


async def test_a_taken_port_fails_start_and_stop_is_safe_before_start() -> None:
    first = HealthServer("127.0.0.1:0")
    await first.start()
    try:
        second = HealthServer(f"127.0.0.1:{first.port}")
        with pytest.raises(OSError, match="in use"):
            await second.start()
        await second.stop()
    finally:
        await first.stop()


async def test_stop_closes_the_port(http: aiohttp.ClientSession) -> None:
    server = HealthServer("127.0.0.1:0")
    await server.start()
    port = server.port
    await server.stop()

    with pytest.raises(aiohttp.ClientConnectionError):
        await get(http, port, "/healthz")


class TokenList:
    """Allows exactly the listed tokens; records what it was asked (never the token)."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = allowed
        self.asked: list[tuple[str, str]] = []

    async def decide(self, authorization: str | None, method: str, path: str) -> Decision:
        self.asked.append((method, path))
        if authorization is None:
            return Decision(401, "Unauthorized")
        if authorization.removeprefix("Bearer ") in self.allowed:
            return Decision(200)
        return Decision(403, "Authorization denied for user someone")


async def test_secure_metrics_are_https_with_a_self_signed_certificate_and_reviewed(
    http: aiohttp.ClientSession,
) -> None:
    registry = CollectorRegistry()
    Counter("demo_reconciles", "Reconciles done.", registry=registry).inc()
    auth = TokenList("good")
    server = MetricsServer(registry, "127.0.0.1:0", tls=self_signed_context(), auth=auth)
    await server.start()
    url = f"https://127.0.0.1:{server.port}/metrics"
    try:
        assert server.secure
        async with http.get(url, ssl=False) as anonymous:
            assert (anonymous.status, await anonymous.text()) == (401, "Unauthorized\n")
        async with http.get(url, ssl=False, headers={"Authorization": "Bearer bad"}) as denied:
            assert denied.status == 403
        async with http.get(url, ssl=False, headers={"Authorization": "Bearer good"}) as ok:
            assert ok.status == 200
            assert "demo_reconciles_total 1.0" in await ok.text()
        with pytest.raises(aiohttp.ClientError):  # plain HTTP is not answered
            async with http.get(f"http://127.0.0.1:{server.port}/metrics"):
                pass
        # The certificate names this host, but nobody issued it: verification must fail.
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with http.get(url):
                pass
    finally:
        await server.stop()
    assert auth.asked[0] == ("GET", "/metrics")


def test_the_self_signed_certificate_serves_localhost_for_a_year() -> None:
    cert_pem, key_pem = self_signed_pem("controller-abc")
    certificate = x509.load_pem_x509_certificate(cert_pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "controller-abc"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime == datetime.timedelta(days=365, hours=1)
    assert b"PRIVATE KEY" in key_pem
