"""Every port answers a request without a Host header, or with two, as Go's net/http does: 400.

RFC 9112, 3.2: a client MUST send a Host header in every HTTP/1.1 request, and a server MUST
answer 400 to one that lacks it or carries more than one. Go's server does (`missing required
Host header`, `too many Host headers`); ours served such a request (404 or 405, issue 45). The
check lives in the generic server (runtime/http1server.py), so the metrics, health and webhook
ports share it; each is asked over a real socket here.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from jobset_controller.api import FeatureGates
from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.metrics_and_health import HealthServer, MetricsServer
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem
from jobset_controller.webhook.server import WebhookServer

NO_HOST = b"GET /healthz HTTP/1.1\r\n\r\n"
TWO_HOSTS = b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"
ONE_HOST = b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
HTTP10_NO_HOST = b"GET /healthz HTTP/1.0\r\n\r\n"
HTTP10_TWO_HOSTS = b"GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"

Port = tuple[int, ssl.SSLContext | None]


@asynccontextmanager
async def plain_port(server: HealthServer | MetricsServer) -> AsyncIterator[Port]:
    await server.start()
    try:
        assert server.port is not None
        yield server.port, None
    finally:
        await server.stop()


def health_port(_: Path) -> AbstractAsyncContextManager[Port]:
    return plain_port(HealthServer("127.0.0.1:0"))


def metrics_port(_: Path) -> AbstractAsyncContextManager[Port]:
    return plain_port(MetricsServer(CollectorRegistry(), "127.0.0.1:0"))


@asynccontextmanager
async def webhook_port(cert_dir: Path) -> AsyncIterator[Port]:
    cert, key = self_signed_pem()
    (cert_dir / CERT_FILE).write_bytes(cert)
    (cert_dir / KEY_FILE).write_bytes(key)
    server = WebhookServer(
        lookup_claim=None,
        features=FeatureGates(),
        ssl_context=pair_context(cert_dir),
        host="127.0.0.1",
        port=0,
    )
    await server.start()
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE  # a self-signed pair on loopback
    try:
        assert server.port is not None
        yield server.port, client
    finally:
        await server.stop()


SERVERS = {"health": health_port, "metrics": metrics_port, "webhook": webhook_port}


async def answer(port: Port, request: bytes) -> bytes:
    """The status line of the server's answer to `request`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port[0], ssl=port[1])
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()


@pytest.mark.parametrize("name", list(SERVERS))
@pytest.mark.parametrize(
    ("request_bytes", "refused"),
    [
        pytest.param(NO_HOST, True, id="HTTP/1.1 without Host"),
        pytest.param(TWO_HOSTS, True, id="HTTP/1.1 with two"),
        pytest.param(HTTP10_TWO_HOSTS, True, id="HTTP/1.0 with two"),
        pytest.param(HTTP10_NO_HOST, False, id="HTTP/1.0 without Host"),
        pytest.param(ONE_HOST, False, id="HTTP/1.1 with one"),
    ],
)
async def test_a_request_without_exactly_one_host_header_is_a_bad_request(
    name: str, request_bytes: bytes, refused: bool, tmp_path: Path
) -> None:
    async with SERVERS[name](tmp_path) as port:
        status_line = await answer(port, request_bytes)
    code = int(status_line.split()[1])
    if refused:
        assert code == 400, status_line
    else:
        assert code != 400, status_line
