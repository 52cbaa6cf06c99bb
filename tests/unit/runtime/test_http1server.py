"""The small HTTP server's guarantees (runtime/http1server.py), each checked with raw bytes over a
real socket on 127.0.0.1, so limits, framing and timeouts are seen as a client sees them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobset_controller.runtime.http1server import HttpServer, Reply, Request
from jobset_controller_dev.envtest.polling import eventually


async def echo(request: Request) -> Reply:
    return Reply(body=request.method.encode() + b" " + request.path.encode() + b" " + request.body)


async def broken(request: Request) -> Reply:
    raise RuntimeError("secret detail")


@contextlib.asynccontextmanager
async def server(**options: float) -> AsyncIterator[HttpServer]:
    http = HttpServer(
        {"/echo": {"POST": echo, "GET": echo}, "/broken": {"GET": broken}},
        name="test",
        max_body=1000,
        **options,  # type: ignore[arg-type]
    )
    await http.start("127.0.0.1", 0)
    try:
        yield http
    finally:
        await http.stop()


async def exchange(port: int, data: bytes, answers: int = 1) -> tuple[list[bytes], bool]:
    """Send raw bytes; the answers read (each head + body), and whether the server then closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    got = []
    try:
        for _ in range(answers):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            got.append(head + await reader.readexactly(length))
        closed = await asyncio.wait_for(reader.read(1), 0.5) == b""
    except TimeoutError:
        closed = False
    finally:
        writer.close()
    return got, closed


def status(answer: bytes) -> int:
    return int(answer.split(b" ")[1])


async def test_requests_on_one_connection_are_answered_in_order_and_it_stays_open() -> None:
    async with server() as http:
        assert http.port is not None
        requests = b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\nPOST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"  # noqa: E501
        answers, closed = await exchange(http.port, requests, answers=2)
    assert [a.rpartition(b"\r\n\r\n")[2] for a in answers] == [b"GET /echo ", b"POST /echo abc"]
    assert not closed


async def test_connection_close_is_honoured() -> None:
    async with server() as http:
        assert http.port is not None
        answers, closed = await exchange(
            http.port, b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
    assert status(answers[0]) == 200
    assert b"Connection: close" in answers[0]
    assert closed


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n", 404),
        (b"DELETE /echo HTTP/1.1\r\nHost: t\r\n\r\n", 405),
    ],
)
async def test_unknown_paths_and_methods_are_refused(request_bytes: bytes, code: int) -> None:
    async with server() as http:
        assert http.port is not None
        answers, _ = await exchange(http.port, request_bytes)
    assert status(answers[0]) == code
    if code == 405:
        assert b"Allow: GET, POST" in answers[0]


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n", 413),
        (
            b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",  # noqa: E501
            411,
        ),
        (b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /echo HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (b"NONSENSE\r\n\r\n", 400),
    ],
)
async def test_requests_outside_the_limits_are_refused_and_the_connection_closed(
    request_bytes: bytes, code: int
) -> None:
    async with server() as http:
        assert http.port is not None
        answers, closed = await exchange(http.port, request_bytes)
    assert status(answers[0]) == code
    assert closed


async def test_a_handler_that_raises_answers_500_without_its_error() -> None:
    async with server() as http:
        assert http.port is not None
        answers, closed = await exchange(http.port, b"GET /broken HTTP/1.1\r\nHost: t\r\n\r\n")
    assert status(answers[0]) == 500
    assert b"secret detail" not in answers[0]
    assert not closed


async def test_a_stalled_request_is_dropped_after_the_header_timeout() -> None:
    async with server(header_timeout=0.2) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /echo HTTP/1.1\r\nHost: t\r\n")  # never finished
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    async with server(idle_timeout=0.2) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        await reader.readuntil(b"GET /echo ")
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    async with server() as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == (
            b"HTTP/1.1 100 Continue\r\n\r\n"
        )
        writer.write(b"hi")
        assert (await asyncio.wait_for(reader.readuntil(b"POST /echo hi"), 5)).startswith(
            b"HTTP/1.1 200 OK"
        )
        writer.close()


async def test_stop_closes_open_connections_and_the_port() -> None:
    async with server() as http:
        assert http.port is not None
        port = http.port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await http.stop()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \xb2\r\n\r\na",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: " + b"9" * 19 + b"\r\n\r\na",
    ],
)
async def test_a_content_length_that_could_be_read_two_ways_is_refused(
    request_bytes: bytes,
) -> None:
    async with server() as http:
        assert http.port is not None
        answers, closed = await exchange(http.port, request_bytes)
    assert status(answers[0]) == 400
    assert closed


async def test_an_answer_to_head_has_no_body() -> None:
    async with server() as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(
            b"HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"  # noqa: E501
        )
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 405 ")
    assert rest.startswith(b"HTTP/1.1 200 OK")  # nothing between the two answers


async def test_a_body_that_stalls_on_a_kept_alive_line_is_dropped_after_the_header_timeout() -> (
    None
):
    async with server(header_timeout=0.3, idle_timeout=30) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"GET /echo "), 5)
        writer.write(
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab"
        )  # 3 bytes never come
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


# ---- hostile requests (issue 24): answered as Go's net/http answers them, then closed


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"GET /echo HTTP/1.1\r\nHost: a\x00b\r\n\r\n", 400),  # NUL in a value
        (b"GET /echo HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400),  # bare CR in a value
        (b"GET /echo HTTP/1.1\r\nHost: t\r\nX: a\x01b\r\n\r\n", 400),  # another control character
        (b"GET /echo HTTP/1.1\r\nHost: t\r\nBad Name: a\r\n\r\n", 400),  # space inside a name
        (b"GET /echo HTTP/1.1\r\nHost: t\r\nHost : a\r\n\r\n", 400),  # space before the colon
        (b"GET /echo HTTP/1.9\r\nHost: a\r\n\r\n", 505),
        (b"GET /echo HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),  # an HTTP/2 preface
        (b"GET /echo HTTP/1.1\nHost: a\n\n", 400),  # bare LF line ends
        (b"GET /echo HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", 400),  # a bare LF inside a CRLF head
        (b"GET /echo HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n", 400),  # obsolete line folding
        (
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \xa05\r\n\r\nhello",
            400,
        ),  # not HTTP space
        (b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \x0b5\r\n\r\nhello", 400),
        (
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",  # noqa: E501
            400,
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",  # noqa: E501
            400,
        ),
        (b"POST /echo HTTP/1.1\r\nHost: a\r\n\r\n", 411),  # a POST without a length
    ],
)
async def test_hostile_requests_are_answered_at_once_as_go_answers_them(
    request_bytes: bytes, code: int
) -> None:
    # A long header timeout: an answer that came only when it fired would fail `exchange`'s 5 s.
    async with server(header_timeout=60) as http:
        assert http.port is not None
        answers, closed = await exchange(http.port, request_bytes)
        assert status(answers[0]) == code, answers[0]
        assert closed
        # The server is still there for the next client.
        again, _ = await exchange(http.port, b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status(again[0]) == 200


async def test_header_values_keep_what_is_not_http_whitespace() -> None:
    seen: list[str] = []

    async def record(request: Request) -> Reply:
        seen.append(request.headers["x"])
        return Reply()

    http = HttpServer({"/": {"GET": record}}, name="test")
    await http.start("127.0.0.1", 0)
    try:
        assert http.port is not None
        await exchange(http.port, b"GET / HTTP/1.1\r\nHost: t\r\nX: \t\xa0value\x85 \t\r\n\r\n")
    finally:
        await http.stop()
    assert seen == ["\xa0value\x85"]


async def test_a_head_sent_a_byte_at_a_time_is_read() -> None:
    async with server() as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        request = b"GET /echo HTTP/1.1\r\nHost: t\r\nX: " + b"a" * 3000 + b"\r\n\r\n"
        for byte in range(len(request)):
            writer.write(request[byte : byte + 1])
            await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"GET /echo "), 5)
        assert head.startswith(b"HTTP/1.1 200")
        writer.close()


async def test_a_refused_client_still_sending_its_body_reads_the_answer() -> None:
    """A lingering close: the 413 is read in full although the client had sent 512 KiB more
    (closing with that unread would reset the connection and could drop the answer)."""
    async with server() as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000000\r\n\r\n" + b"x" * 512 * 1024
        )
        data = await asyncio.wait_for(reader.read(), 5)  # up to the server's EOF, no reset
        assert data.startswith(b"HTTP/1.1 413 ")
        assert data.endswith(b"request body too large\n")
        writer.close()


async def test_pipelined_requests_from_a_client_that_does_not_read_do_not_grow_the_output() -> None:
    async with server() as http:
        assert http.port is not None
        loop = asyncio.get_running_loop()
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
        client.setblocking(False)
        await loop.sock_connect(client, ("127.0.0.1", http.port))
        await eventually(
            lambda: len(http._connections) == 1, "len(http._connections) == 1", 5.0, interval=0.005
        )
        (connection,) = list(http._connections)
        transport = connection._transport
        assert transport is not None
        # The kernel's share of the answers small too, so the test needs few requests.
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        request = b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"

        async def flood() -> None:
            with contextlib.suppress(OSError):
                while True:
                    await loop.sock_sendall(client, request * 500)  # blocks once unread

        flooding = asyncio.create_task(flood())
        try:
            await eventually(
                lambda: connection._writing_paused, "connection._writing_paused", 20, interval=0.005
            )
            # Paused, the server stops reading the client's requests: their answers cannot
            # grow the output. Judged over loop iterations (each one runs every socket that is
            # ready: the flood's sends and the server's reads), not over wall time.
            assert not transport.is_reading()
            sizes = [transport.get_write_buffer_size()]
            for _ in range(500):
                await asyncio.sleep(0)
                sizes.append(transport.get_write_buffer_size())
            assert max(sizes) < 128 * 1024, sizes
            assert connection._writing_paused
            assert not transport.is_reading()
        finally:
            flooding.cancel()
            client.close()


async def never(request: Request) -> Reply:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def cancelled_inside(request: Request) -> Reply:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future  # the handler's own await was cancelled: not the server's doing
    raise AssertionError("unreachable")


async def test_a_handler_past_its_deadline_answers_503_and_the_connection_goes_on() -> None:
    http = HttpServer(
        {"/slow": {"GET": never}, "/echo": {"GET": echo}}, name="test", handler_timeout=0.1
    )
    await http.start("127.0.0.1", 0)
    try:
        assert http.port is not None
        answers, closed = await exchange(
            http.port,
            b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n",
            answers=2,
        )
    finally:
        await http.stop()
    assert [status(answer) for answer in answers] == [503, 200]
    assert not closed


async def test_a_handler_cancelled_from_inside_does_not_wedge_the_connection() -> None:
    http = HttpServer({"/c": {"GET": cancelled_inside}, "/echo": {"GET": echo}}, name="test")
    await http.start("127.0.0.1", 0)
    try:
        assert http.port is not None
        answers, closed = await exchange(
            http.port,
            b"GET /c HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n",
            answers=2,
        )
    finally:
        await http.stop()
    assert [status(answer) for answer in answers] == [500, 200]
    assert not closed


async def test_a_client_that_leaves_mid_request_cancels_its_handler_cleanly() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def waits(request: Request) -> Reply:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    http = HttpServer({"/w": {"GET": waits}}, name="test")
    await http.start("127.0.0.1", 0)
    try:
        assert http.port is not None
        _, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /w HTTP/1.1\r\nHost: t\r\n\r\n")
        await asyncio.wait_for(started.wait(), 5)
        writer.transport.abort()
        await asyncio.wait_for(cancelled.wait(), 5)
        await eventually(
            lambda: not http._connections, "not http._connections", 5.0, interval=0.005
        )
    finally:
        await http.stop()


# ---- property: whatever arrives, the server answers or closes in time and stays up

ODD_METHODS = st.sampled_from(["GET", "POST", "HEAD", "PUT", "DELETE", "get", "G\x00T", "", "PRI"])
ODD_TARGETS = st.sampled_from(["/echo", "/echo?x=1", "*", "http://a/echo", "/e cho", "", "/\x7f"])
ODD_VERSIONS = st.sampled_from(
    ["HTTP/1.1", "HTTP/1.0", "HTTP/1.9", "HTTP/2.0", "HTTP/0.9", "", "H"]
)
ENDS = st.sampled_from([b"\r\n", b"\n", b"\r", b"\n\r"])
HEADER_TEXT = st.binary(max_size=12) | st.sampled_from(
    [b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect", b"5", b"close", b"chunked"]
)


@st.composite
def odd_requests(draw: st.DrawFn) -> bytes:
    """A request that is nearly right: odd methods, targets, versions, line ends, headers."""
    end = draw(ENDS)
    line = f"{draw(ODD_METHODS)} {draw(ODD_TARGETS)} {draw(ODD_VERSIONS)}".encode("latin-1")
    headers = [
        draw(HEADER_TEXT) + draw(st.sampled_from([b": ", b":", b" : ", b""])) + draw(HEADER_TEXT)
        for _ in range(draw(st.integers(min_value=0, max_value=4)))
    ]
    return end.join([line, *headers, b"", b""]) + draw(st.binary(max_size=20))


ANY_INPUT = (
    st.binary(max_size=200) | odd_requests() | st.lists(odd_requests(), max_size=3).map(b"".join)
)
LIMIT = 0.3  # the header, body and idle timeouts of the server under test


async def _judge(data: bytes) -> None:
    async with server(header_timeout=LIMIT, idle_timeout=LIMIT) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(data)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        # Answers, then the end: within the timeouts (and the linger after a refusal).
        async with asyncio.timeout(LIMIT + 3):
            with contextlib.suppress(ConnectionError):
                received = await reader.read()
        writer.close()
        for answer in received.split(b"HTTP/1.1 ")[1:]:
            assert int(answer[:3]) in {100, 200, 400, 404, 405, 411, 413, 431, 500, 503, 505}
        answers, _ = await exchange(
            http.port, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nok"
        )
        assert answers[0].endswith(b"POST /echo ok")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=ANY_INPUT)
@example(data=b"GET /echo HTTP/1.1\nHost: a\n\n")
@example(data=b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n" * 50)
@example(data=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a TLS ClientHello
@example(data=b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
def test_any_input_is_answered_or_closed_in_time_and_the_server_stays_up(data: bytes) -> None:
    asyncio.run(_judge(data))
