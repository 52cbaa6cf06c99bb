"""The HTTP/1.1 pool's guarantees (runtime/http1client.py), each against a real socket on 127.0.0.1:
a small server that reads requests and answers with scripted bytes, so framing, reuse, failure
and timeouts are exercised on the wire, byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from jobset_controller.runtime.http1client import (
    ConnectionPool,
    Endpoint,
    TransportError,
    _Connection,
    check_header_value,
    check_target,
)
from jobset_controller.runtime.servingtls import self_signed_pem
from jobset_controller_dev.envtest.polling import eventually

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def chunked(body: bytes, size: int) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for start in range(0, len(body), size):
        piece = body[start : start + size]
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n\r\n"


class ScriptServer:
    """Answers each request it reads (up to the blank line, plus Content-Length bytes) with the
    next scripted action: bytes to write, or a callable deciding what to do with the writer."""

    def __init__(self, script: list[bytes | Callable[[asyncio.StreamWriter], None]]) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.eofs = 0
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                action = self.script.pop(0) if self.script else OK
                if isinstance(action, bytes):
                    writer.write(action)
                    await writer.drain()
                else:
                    action(writer)
                    if writer.is_closing():
                        return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eofs += 1
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serving(
    script: list[bytes | Callable[[asyncio.StreamWriter], None]],
) -> AsyncIterator[tuple[ScriptServer, ConnectionPool]]:
    server = ScriptServer(script)
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    pool = ConnectionPool(Endpoint.for_url(f"http://127.0.0.1:{server.port}", None))
    try:
        yield server, pool
    finally:
        await pool.close()
        server.server.close()


async def test_a_content_length_answer_is_read_and_its_connection_reused() -> None:
    async with serving([OK, OK]) as (server, pool):
        first = await pool.request("GET", "/a", "", None, time_limit=5)
        second = await pool.request("POST", "/b", "", b'{"x":1}', time_limit=5)
    assert (first.status, first.body, second.body) == (200, b"{}", b"{}")
    assert server.connections == 1
    assert server.requests[1].endswith(b"Content-Length: 7\r\n\r\n" + b'{"x":1}')


@pytest.mark.parametrize("size", [1, 3, 4096])
async def test_a_chunked_answer_is_reassembled_whatever_the_chunk_size(size: int) -> None:
    body = b'{"items":[' + b",".join(b'{"n":%d}' % n for n in range(300)) + b"]}"
    async with serving([chunked(body, size), OK]) as (server, pool):
        answer = await pool.request("GET", "/list", "", None, time_limit=5)
        await pool.request("GET", "/again", "", None, time_limit=5)
    assert answer.body == body
    assert server.connections == 1  # the chunked answer ended cleanly: connection reused


def test_the_parser_gives_the_same_answer_for_every_split_of_the_bytes() -> None:
    wire = chunked(b"hello world, this is a body", 5)
    wire = wire.replace(b"0\r\n\r\n", b"0\r\nX-Trailer: yes\r\n\r\n")
    for cut in range(1, len(wire)):
        for second in range(cut + 1, len(wire)):
            parts = [wire[:cut], wire[cut:second], wire[second:]]
            body, at_rest = feed(parts)
            assert (body, at_rest) == (b"hello world, this is a body", True), (cut, second)


def feed(parts: list[bytes]) -> tuple[bytes, bool]:
    """The body a connection reads from an answer given in these parts, and whether it is then
    ready for the next request."""

    class Sink:
        def write(self, data: bytes) -> None:
            pass

        def is_closing(self) -> bool:
            return False

    connection = _Connection()
    connection.transport = Sink()  # type: ignore[assignment]

    async def run() -> bytes:
        connection.send(b"GET / HTTP/1.1\r\n\r\n", expect_body=True)
        for part in parts:
            connection.data_received(part)
        return await connection.body()

    body = asyncio.run(run())
    return body, connection.at_rest


async def test_an_answer_with_connection_close_is_not_reused() -> None:
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    async with serving([close, OK]) as (server, pool):
        await pool.request("GET", "/a", "", None, time_limit=5)
        await pool.request("GET", "/b", "", None, time_limit=5)
    assert server.connections == 2


async def test_an_answer_without_length_ends_with_the_connection() -> None:
    def answer_then_close(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        writer.close()

    async with serving([answer_then_close]) as (_, pool):
        answer = await pool.request("GET", "/a", "", None, time_limit=5)
    assert answer.body == b"until the end"


async def test_no_content_has_no_body_and_keeps_the_connection() -> None:
    async with serving([b"HTTP/1.1 204 No Content\r\n\r\n", OK]) as (server, pool):
        answer = await pool.request("DELETE", "/a", "", None, time_limit=5)
        await pool.request("GET", "/b", "", None, time_limit=5)
    assert (answer.status, answer.body, server.connections) == (204, b"", 1)


def drop(writer: asyncio.StreamWriter) -> None:
    writer.close()


async def test_a_read_on_a_connection_the_server_dropped_is_sent_again_once() -> None:
    async with serving([OK, drop, OK]) as (server, pool):
        await pool.request("GET", "/a", "", None, time_limit=5)
        answer = await pool.request("GET", "/b", "", None, time_limit=5)
    assert answer.body == b"{}"
    assert [r.split(b" ")[1] for r in server.requests] == [b"/a", b"/b", b"/b"]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_a_write_on_a_connection_the_server_dropped_is_not_sent_again(method: str) -> None:
    async with serving([OK, drop, OK]) as (server, pool):
        await pool.request("GET", "/a", "", None, time_limit=5)
        with pytest.raises(TransportError):
            await pool.request(method, "/b", "", b"{}", time_limit=5)
    assert len(server.requests) == 2


async def test_an_answer_cut_short_is_a_transport_error() -> None:
    def half(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
        writer.close()

    async with serving([half]) as (_, pool):
        with pytest.raises(TransportError, match="before the answer was complete"):
            await pool.request("GET", "/a", "", None, time_limit=5)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\na\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n",
    ],
)
async def test_malformed_lengths_are_transport_errors(answer: bytes) -> None:
    async with serving([answer]) as (_, pool):
        with pytest.raises(TransportError, match="malformed"):
            await pool.request("GET", "/a", "", None, time_limit=5)


async def test_a_malformed_answer_is_a_transport_error_and_the_connection_dropped() -> None:
    async with serving([b"SSH-2.0-OpenSSH\r\n\r\n", OK]) as (server, pool):
        with pytest.raises(TransportError, match="malformed answer"):
            await pool.request("GET", "/a", "", None, time_limit=5)
        await pool.request("GET", "/b", "", None, time_limit=5)
    assert server.connections == 2


async def test_a_silent_server_times_out_and_the_connection_is_closed() -> None:
    def silent(writer: asyncio.StreamWriter) -> None:
        pass

    async with serving([silent, OK]) as (server, pool):
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/a", "", None, time_limit=0.2)
        answer = await pool.request("GET", "/b", "", None, time_limit=5)
        await eventually(lambda: server.eofs > 0, "the server saw the close", 5.0, interval=0.01)
    assert answer.body == b"{}"
    assert (server.connections, server.eofs) == (2, 1)


async def test_a_stream_yields_pieces_as_they_come_and_times_out_when_silent() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    def two_events(writer: asyncio.StreamWriter) -> None:
        writer.write(head + b"4\r\none\n\r\n4\r\ntwo\n\r\n")

    async with serving([two_events]) as (_, pool):
        got: list[bytes] = []

        async def read_all() -> None:
            async with pool.stream("GET", "/watch", "", read_timeout=0.3) as stream:
                assert stream.status == 200
                async for piece in stream.pieces():
                    got.append(piece)

        with pytest.raises(TimeoutError):
            await read_all()
    assert b"".join(got) == b"one\ntwo\n"


async def test_at_most_limit_requests_are_in_flight() -> None:
    release = asyncio.Event()
    in_flight, most, connections = 0, 0, 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, most, connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                in_flight += 1
                most = max(most, in_flight)
                await release.wait()
                in_flight -= 1
                writer.write(OK)
                await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(Endpoint.for_url(f"http://127.0.0.1:{port}", None), limit=2)
    try:
        calls = [pool.request("GET", f"/{n}", "", None, time_limit=5) for n in range(6)]
        tasks = [asyncio.create_task(call) for call in calls]
        await eventually(lambda: in_flight == 2, "two requests at the server", 5.0, interval=0.01)
        release.set()
        answers = await asyncio.gather(*tasks)
    finally:
        await pool.close()
        server.close()
    assert [a.status for a in answers] == [200] * 6
    # A request holds its connection until answered, so n requests in flight at once need n
    # connections: six answers over two connections show no third was ever in flight, whatever
    # the timing.
    assert (connections, most) == (2, 2)


@pytest.mark.parametrize(
    "value", ["Bearer abc\r\nX-Evil: 1", "Bearer abc\n", "Bearer \x00", "Bearer é"]
)
def test_a_header_value_that_could_split_the_request_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="only printable ASCII"):
        check_header_value("Authorization", value)


@pytest.mark.parametrize("target", ["/api v1", "/api\r\nHost: x", ""])
def test_a_target_that_is_not_visible_ascii_is_refused(target: str) -> None:
    with pytest.raises(ValueError, match="only visible ASCII"):
        check_target(target)


async def test_https_through_a_proxy_tunnels_with_connect_and_proxy_credentials(
    tmp_path: Path,
) -> None:
    cert, key = self_signed_pem("localhost")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    (tmp_path / "pair.pem").write_bytes(cert + key)
    server_context.load_cert_chain(tmp_path / "pair.pem")
    client_context = ssl.create_default_context(cadata=cert.decode())

    origin = ScriptServer([OK])
    origin.server = await asyncio.start_server(origin.handle, "127.0.0.1", 0, ssl=server_context)
    connects: list[bytes] = []

    async def tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        connects.append(head)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", origin.port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    origin_port = origin.port
    proxy = await asyncio.start_server(tunnel, "127.0.0.1", 0)
    proxy_port = proxy.sockets[0].getsockname()[1]
    endpoint = Endpoint.for_url(
        f"https://localhost:{origin.port}",
        client_context,
        proxy=f"http://user:p%40ss@127.0.0.1:{proxy_port}",
    )
    pool = ConnectionPool(endpoint)
    try:
        answer = await pool.request("GET", "/api", "", None, time_limit=5)
    finally:
        await pool.close()
        proxy.close()
        origin.server.close()
    assert answer.body == b"{}"
    assert connects[0].startswith(f"CONNECT localhost:{origin_port} HTTP/1.1\r\n".encode())
    assert b"Proxy-Authorization: Basic dXNlcjpwQHNz\r\n" in connects[0]  # user:p@ss
    assert origin.requests[0].startswith(b"GET /api HTTP/1.1\r\n")


@pytest.mark.parametrize(
    "proxy", ["https://proxy.test:3128", "http://proxy.test:99999", "http://:3128", "socks5://p:1"]
)
def test_only_http_proxies_with_a_host_and_port_are_accepted(proxy: str) -> None:
    with pytest.raises(ValueError, match=r"only http://host\[:port\] proxies"):
        Endpoint.for_url("https://api.test:6443", None, proxy=proxy)
