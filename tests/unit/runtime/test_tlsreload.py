"""A TLS server on 127.0.0.1 follows its certificate files: new handshakes get the new pair, an
open connection keeps working, a broken pair is ignored. Polling runs on the fake clock."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509

from jobset_controller.manager.environment import default_cert_policy
from jobset_controller.runtime.certrotator import write_files
from jobset_controller.runtime.certs import (
    CERT_FILE,
    KEY_FILE,
    Action,
    Identity,
    Material,
    renew,
)
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.tlsreload import ReloadingTLS

NOW = datetime.datetime.now(datetime.UTC)
IDENTITY = Identity("test-ca", "test", ("localhost",), ("127.0.0.1",))


def _material(previous: Material | None = None) -> Material:
    action = Action.RESIGN if previous is not None else Action.NEW_CA
    return renew(previous, action, IDENTITY, default_cert_policy(), NOW)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()


class Server:
    def __init__(self, tls: ReloadingTLS, ca_bundle: bytes) -> None:
        self.tls = tls
        self.client = ssl.create_default_context(cadata=ca_bundle.decode())
        self.port = 0

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
        """A verified connection (hostname 127.0.0.1); returns the served certificate's serial."""
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, ssl=self.client, server_hostname="127.0.0.1"
        )
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return reader, writer, x509.load_der_x509_certificate(der).serial_number


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Server, Material]]:
    first = _material()
    write_files(tmp_path, first)
    tls = ReloadingTLS.in_dir(tmp_path, clock=FakeClock())  # the rotator's files, by its names
    assert tls.reload()
    server = Server(tls, first.ca_bundle)
    listener = await asyncio.start_server(_echo, "127.0.0.1", 0, ssl=tls.context)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server, first
    finally:
        listener.close()
        await listener.wait_closed()


def _serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


async def test_new_handshakes_get_the_new_certificate_and_open_connections_go_on(
    served: tuple[Server, Material], tmp_path: Path
) -> None:
    server, first = served
    reader, writer, serial = await server.connect()
    assert serial == _serial(first.cert)

    second = _material(first)
    write_files(tmp_path, second)
    assert server.tls.reload()
    assert server.tls.reloads == 2

    writer.write(b"still here\n")  # the connection made before the reload
    assert await reader.readline() == b"still here\n"
    _, fresh_writer, fresh_serial = await server.connect()
    assert fresh_serial == _serial(second.cert)
    for w in (writer, fresh_writer):
        w.close()


async def test_a_mismatched_pair_is_ignored_and_the_previous_one_served(
    served: tuple[Server, Material], tmp_path: Path
) -> None:
    server, first = served
    second = _material(first)
    (tmp_path / CERT_FILE).write_bytes(second.cert)  # the key is still the first one's
    assert server.tls.reload()  # still serving
    assert server.tls.reloads == 1
    _, writer, serial = await server.connect()
    assert serial == _serial(first.cert)
    writer.close()
    (tmp_path / KEY_FILE).write_bytes(second.key)  # the pair is whole again
    server.tls.reload()
    _, writer, serial = await server.connect()
    assert serial == _serial(second.cert)
    writer.close()


async def test_polling_picks_up_a_change_on_the_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    tls = ReloadingTLS(tmp_path / CERT_FILE, tmp_path / KEY_FILE, interval=10.0, clock=clock)
    polling = asyncio.create_task(tls.run())
    try:
        await clock.advance(0)
        assert not tls.loaded  # no files yet
        write_files(tmp_path, _material())
        await clock.advance(9.9)
        assert not tls.loaded
        await clock.advance(0.1)
        assert tls.loaded
        await asyncio.wait_for(tls.wait_loaded(), 1)
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
