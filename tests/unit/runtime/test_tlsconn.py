"""TLS connections sized by what the client sent (runtime/tlsconn.py), over real sockets.

The first tests pin what tlsconn takes from asyncio's ``sslproto`` on the interpreter they run
on (the suite runs on 3.11, 3.12 and 3.13: hack/test-pythons.sh): it subclasses ``SSLProtocol``
and sets its ``max_size``, its read buffer and the buffer limits, so a Python whose
``SSLProtocol`` changed shape fails here, not in production. The last ones pin the way out when
it has: the standard library's TLS path, with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import time
from asyncio import sslproto

import pytest
from structlog.testing import capture_logs
from tests.unit.runtime.conftest import serving

from jobset_controller.runtime import http1server, tlsconn
from jobset_controller.runtime.http1server import HttpServer, Reply, Request
from jobset_controller.runtime.memtrim import TrimAfterCloses
from jobset_controller.runtime.tlsconn import (
    READ_PAUSE_AT,
    RECORD_BUFFER,
    WRITE_PAUSE_AT,
    RecordSizedSSLProtocol,
)
from jobset_controller_dev.envtest.polling import eventually

HELLO_HEADER = b"\x16\x03\x01\x02\x00"  # a handshake record of 512 bytes, as a ClientHello's


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def echo(request: Request) -> Reply:
    return Reply(body=b"got " + request.body)


def tls_server(
    context: ssl.SSLContext, *, header_timeout: float = 10.0, trim: TrimAfterCloses | None = None
) -> contextlib.AbstractAsyncContextManager[HttpServer]:
    """`/echo` over TLS with `context`."""
    options = {"trim": trim} if trim is not None else {}
    return serving({"/echo": {"POST": echo}}, tls=context, header_timeout=header_timeout, **options)


def record_sized(
    loop: asyncio.AbstractEventLoop,
    context: ssl.SSLContext,
    read_buffer: memoryview | None = None,
) -> RecordSizedSSLProtocol:
    """A server-side protocol with no application behind it: enough to read its buffers."""
    return RecordSizedSSLProtocol(
        loop,
        asyncio.Protocol(),
        context,
        loop.create_future(),
        handshake_timeout=10.0,
        shutdown_timeout=2.0,
        read_buffer=read_buffer,
    )


def test_the_stdlib_ssl_protocol_is_left_as_it_is_and_ours_reads_a_record_at_a_time(
    context: ssl.SSLContext,
) -> None:
    loop = asyncio.new_event_loop()
    try:
        stock = sslproto.SSLProtocol(
            loop, asyncio.Protocol(), context, loop.create_future(), server_side=True
        )
        ours = record_sized(loop, context)
        shared = memoryview(bytearray(RECORD_BUFFER))
        sharing = record_sized(loop, context, read_buffer=shared)
    finally:
        loop.close()
    assert sslproto.SSLProtocol.max_size == 256 * 1024  # what the stdlib gives a connection
    assert len(stock.get_buffer(-1)) == 256 * 1024
    assert len(ours.get_buffer(-1)) == RECORD_BUFFER == 16 * 1024 + 512
    assert len(ours.get_buffer(1 << 20)) == RECORD_BUFFER  # never more than one record
    # A shared buffer is the one reads land in: the connection has none of its own.
    assert sharing.get_buffer(-1).obj is shared.obj
    assert ours._app_transport.get_read_buffer_limits() == (RECORD_BUFFER // 2, READ_PAUSE_AT)
    assert ours._app_transport.get_write_buffer_limits() == (WRITE_PAUSE_AT // 4, WRITE_PAUSE_AT)
    assert stock._app_transport.get_read_buffer_limits()[1] == 256 * 1024  # not ours


def test_a_shared_read_buffer_smaller_than_a_record_is_refused(context: ssl.SSLContext) -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="holds no record"):
            record_sized(loop, context, read_buffer=memoryview(bytearray(1024)))
    finally:
        loop.close()


async def post(port: int, body: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context())
    writer.write(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    answer = await reader.readexactly(length)
    writer.close()
    return answer


async def test_a_tls_client_is_served_through_the_first_record_hand_over(
    context: ssl.SSLContext,
) -> None:
    async with tls_server(context) as http:
        assert http.port is not None
        body = b"x" * 100_000  # many records, several reads
        assert await post(http.port, body) == b"got " + body
        assert http._hellos is not None
        assert len(http._hellos) == 0  # handed over and forgotten


async def test_a_client_hello_trickled_a_byte_at_a_time_still_completes_the_handshake(
    context: ssl.SSLContext,
) -> None:
    """The hand-over happens when the record is whole, however it arrived."""
    async with tls_server(context) as http:
        assert http.port is not None
        raw = socket.create_connection(("127.0.0.1", http.port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = client_context().wrap_bio(incoming, outgoing)
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        loop = asyncio.get_running_loop()
        raw.setblocking(False)
        for byte in hello:
            await loop.sock_sendall(raw, bytes([byte]))
            await asyncio.sleep(0)  # separate reads on the server's side, as far as it goes
        while True:
            incoming.write(await loop.sock_recv(raw, 65536))
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await loop.sock_sendall(raw, outgoing.read())
        await loop.sock_sendall(raw, outgoing.read())
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        raw.close()


async def test_bytes_that_cannot_start_a_handshake_are_refused_at_once(
    context: ssl.SSLContext,
) -> None:
    """Plain HTTP on the TLS port goes straight to OpenSSL, which refuses it: the connection
    closes now, not when the handshake's time runs out."""
    async with tls_server(context, header_timeout=30.0) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        async with asyncio.timeout(10):
            while await reader.read(1024):
                pass
        assert time.monotonic() - started < 10
        writer.close()


async def test_the_handshake_time_limit_counts_from_the_accept(context: ssl.SSLContext) -> None:
    """A client that sends its ClientHello late, then stalls, is closed when the limit from
    its accept runs out: the hand-over does not start the clock again."""
    limit = 2.0
    async with tls_server(context, header_timeout=limit) as http:
        assert http.port is not None
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = client_context().wrap_bio(incoming, outgoing)
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(hello[:5])  # the record header only: held as a bare socket
        await asyncio.sleep(limit * 0.8)  # the client's own delay (the stimulus, not a wait)
        writer.write(hello[5:])  # whole: handed over; then the client never finishes
        async with asyncio.timeout(10):
            while await reader.read(65536):
                pass
        closed_after = time.monotonic() - started
        writer.close()
    # From the accept: ~2 s. Had the hand-over started the clock again: ~3.6 s.
    assert limit * 0.9 <= closed_after < limit * 1.5


async def test_a_trickling_client_is_closed_when_the_handshake_time_runs_out(
    context: ssl.SSLContext,
) -> None:
    async with tls_server(context, header_timeout=0.5) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(HELLO_HEADER + b"\x01")
        hellos = http._hellos
        assert hellos is not None
        await eventually(lambda: len(hellos) == 1, "len(hellos) == 1", 10.0, interval=0.005)
        async with asyncio.timeout(10):
            assert await reader.read(1) == b""
        await eventually(lambda: len(hellos) == 0, "len(hellos) == 0", 10.0, interval=0.005)
        writer.close()


async def test_slow_tls_clients_are_bare_sockets_and_a_burst_of_them_closing_is_trimmed(
    context: ssl.SSLContext,
) -> None:
    """Clients trickling a ClientHello have no transport (no asyncio object of a dozen
    pieces); when a burst of them closes, the trim runs once, and nothing of theirs is left."""
    trims: list[float] = []
    trimmed = asyncio.Event()

    def trim() -> bool:
        trims.append(time.monotonic())
        trimmed.set()
        return True

    trimmer = TrimAfterCloses(burst=50, settle=0.01, every=0.0, trim=trim)
    async with tls_server(context, trim=trimmer) as http:
        assert http.port is not None
        writers = []
        for _ in range(60):
            _, writer = await asyncio.open_connection("127.0.0.1", http.port)
            writer.write(HELLO_HEADER + b"\x01")
            writers.append(writer)
        hellos = http._hellos
        assert hellos is not None
        await eventually(lambda: len(hellos) == 60, "len(hellos) == 60", 10.0, interval=0.005)
        served = [  # the server's end of a connection: its own address has the server's port
            o
            for o in gc.get_objects()
            if isinstance(o, asyncio.Transport)
            and (o.get_extra_info("sockname") or ("", 0))[1] == http.port
        ]
        assert served == []
        for writer in writers:
            writer.transport.abort()
        await eventually(lambda: len(hellos) == 0, "len(hellos) == 0", 10.0, interval=0.005)
        async with asyncio.timeout(10):
            await trimmed.wait()
        assert len(trims) == 1  # 60 closes, one burst


# ---- the shape of asyncio's SSLProtocol, and the stdlib path when it is not the one we know
def test_this_interpreters_ssl_protocol_has_the_shape_record_sized_connections_need() -> None:
    assert tlsconn.shape_problem() is None


def test_an_ssl_protocol_of_another_shape_is_named_with_what_it_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(sslproto.SSLProtocol, "max_size")
    assert tlsconn.shape_problem.__wrapped__() == (
        "asyncio.sslproto.SSLProtocol has no integer max_size"
    )


async def test_on_another_shape_tls_is_served_the_stdlib_way_with_one_warning(
    context: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http1server, "shape_problem", lambda: "a shape of another Python")
    monkeypatch.setattr(http1server, "_warned_stdlib_tls", False)
    with capture_logs() as logs:
        async with tls_server(context) as first, tls_server(context) as second:
            for http in (first, second):
                assert http.port is not None
                assert http._hellos is None
                body = b"y" * 100_000
                assert await post(http.port, body) == b"got " + body
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warnings == [
        {
            "event": "TLS connections use the standard library's buffers "
            "(more memory per connection)",
            "reason": "a shape of another Python",
            "log_level": "warning",
        }
    ]
