"""The small HTTP server's guarantees (runtime/http1server.py), each checked with raw bytes over a
real socket on 127.0.0.1, so limits, framing and timeouts are seen as a client sees them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from jobset_controller.runtime.http1server import HttpServer, Reply, Request


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
        requests = b"GET /echo HTTP/1.1\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
        answers, closed = await exchange(http.port, requests, answers=2)
    assert [a.rpartition(b"\r\n\r\n")[2] for a in answers] == [b"GET /echo ", b"POST /echo abc"]
    assert not closed


async def test_connection_close_is_honoured() -> None:
    async with server() as http:
        assert http.port is not None
        answers, closed = await exchange(
            http.port, b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
    assert status(answers[0]) == 200
    assert b"Connection: close" in answers[0]
    assert closed


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (b"GET /nowhere HTTP/1.1\r\n\r\n", 404),
        (b"DELETE /echo HTTP/1.1\r\n\r\n", 405),
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
        (b"POST /echo HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 411),
        (b"POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /echo HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431),
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
        answers, closed = await exchange(http.port, b"GET /broken HTTP/1.1\r\n\r\n")
    assert status(answers[0]) == 500
    assert b"secret detail" not in answers[0]
    assert not closed


async def test_a_stalled_request_is_dropped_after_the_header_timeout() -> None:
    async with server(header_timeout=0.2) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /echo HTTP/1.1\r\n")  # never finished
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    async with server(idle_timeout=0.2) as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"GET /echo HTTP/1.1\r\n\r\n")
        await reader.readuntil(b"GET /echo ")
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    async with server() as http:
        assert http.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
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
        b"POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
        b"POST /echo HTTP/1.1\r\nContent-Length: \xb2\r\n\r\na",
        b"POST /echo HTTP/1.1\r\nContent-Length: " + b"9" * 19 + b"\r\n\r\na",
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
        writer.write(b"HEAD /echo HTTP/1.1\r\n\r\nGET /echo HTTP/1.1\r\nConnection: close\r\n\r\n")
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
        writer.write(b"GET /echo HTTP/1.1\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"GET /echo "), 5)
        writer.write(b"POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")  # 3 bytes never come
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
