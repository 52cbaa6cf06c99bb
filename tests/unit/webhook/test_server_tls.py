"""The webhook server's TLS follows the Configuration's `tls` settings, like every other listener.

The server is handed a context from runtime/servingtls.py (the one builder of server contexts);
these tests pin that what it then negotiates honours `minVersion`, `cipherSuites` and HTTP/1.1-only
ALPN, which a context built inside the webhook package once ignored.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem, server_context
from jobset_controller.runtime.tlsreload import ReloadingTLS
from jobset_controller.webhook.server import WebhookServer

ECDSA_AES128 = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
# A refused handshake: an alert (SSLError), or the server closing before the client reads one.
REFUSED = (ssl.SSLError, ConnectionError)


@asynccontextmanager
async def serving(context: ssl.SSLContext) -> AsyncIterator[int]:
    server = WebhookServer(
        lookup_claim=None, features=FeatureGates(), ssl_context=context, host="127.0.0.1", port=0
    )
    await server.start()
    try:
        assert server.port is not None
        yield server.port
    finally:
        await server.stop()


def write_pair(cert_dir: Path) -> None:
    cert, key = self_signed_pem()  # an ECDSA key: the ECDHE-ECDSA suites apply
    (cert_dir / CERT_FILE).write_bytes(cert)
    (cert_dir / KEY_FILE).write_bytes(key)


def client(
    *, maximum: ssl.TLSVersion | None = None, ciphers: str = "", alpn: Sequence[str] = ()
) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if maximum is not None:
        context.maximum_version = maximum
    if ciphers:
        context.set_ciphers(ciphers)
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


async def handshake(port: int, context: ssl.SSLContext) -> ssl.SSLObject:
    """Complete a handshake and return the TLS object (`REFUSED` when refused)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        tls = writer.get_extra_info("ssl_object")
        assert isinstance(tls, ssl.SSLObject)
        return tls
    finally:
        writer.close()
        await writer.wait_closed()


Builder = Callable[[Path, str, Sequence[str]], ssl.SSLContext]


def fixed(cert_dir: Path, min_version: str, ciphers: Sequence[str]) -> ssl.SSLContext:
    return pair_context(cert_dir, min_version, ciphers)


def reloading(cert_dir: Path, min_version: str, ciphers: Sequence[str]) -> ssl.SSLContext:
    """What the manager hands over: a ReloadingTLS whose contexts come from server_context."""
    tls = ReloadingTLS.in_dir(cert_dir, make_context=lambda: server_context(min_version, ciphers))
    assert tls.reload()
    return tls.context


BUILDERS = [pytest.param(fixed, id="pair_context"), pytest.param(reloading, id="reloading")]


@pytest.mark.parametrize("build", BUILDERS)
async def test_min_version_tls13_refuses_a_tls12_client(tmp_path: Path, build: Builder) -> None:
    write_pair(tmp_path)
    async with serving(build(tmp_path, "VersionTLS13", ())) as port:
        with pytest.raises(REFUSED):
            await handshake(port, client(maximum=ssl.TLSVersion.TLSv1_2))
        tls = await handshake(port, client())
        assert tls.version() == "TLSv1.3"


@pytest.mark.parametrize("build", BUILDERS)
async def test_the_default_accepts_tls12(tmp_path: Path, build: Builder) -> None:
    write_pair(tmp_path)
    async with serving(build(tmp_path, "", ())) as port:
        tls = await handshake(port, client(maximum=ssl.TLSVersion.TLSv1_2))
        assert tls.version() == "TLSv1.2"


@pytest.mark.parametrize("build", BUILDERS)
async def test_only_the_configured_tls12_cipher_suites_are_negotiated(
    tmp_path: Path, build: Builder
) -> None:
    write_pair(tmp_path)
    async with serving(build(tmp_path, "", (ECDSA_AES128,))) as port:
        with pytest.raises(REFUSED):
            await handshake(
                port,
                client(maximum=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-ECDSA-AES256-GCM-SHA384"),
            )
        tls = await handshake(
            port,
            client(
                maximum=ssl.TLSVersion.TLSv1_2,
                ciphers="ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256",
            ),
        )
        cipher = tls.cipher()
        assert cipher is not None
        assert cipher[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"


@pytest.mark.parametrize("build", BUILDERS)
async def test_alpn_offers_http11_only(tmp_path: Path, build: Builder) -> None:
    write_pair(tmp_path)
    async with serving(build(tmp_path, "", ())) as port:
        tls = await handshake(port, client(alpn=("h2", "http/1.1")))
        assert tls.selected_alpn_protocol() == "http/1.1"
