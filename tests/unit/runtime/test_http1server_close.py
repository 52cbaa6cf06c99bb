"""How the HTTP/1.1 server (runtime/http1server.py) ends a connection after an answer that closes
it, and how it reads request lines, each seen from a real socket on 127.0.0.1: a TLS client gets
close_notify at once (not after the linger's 2 s), a client that reset the connection costs no
traceback, and a request line with more than one space between its parts is refused as Go's
net/http refuses it."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from typing import Any

import pytest

from jobset_controller.runtime import http1server
from jobset_controller.runtime.http1server import Reply, Request, _ServerConnection
from jobset_controller_dev.envtest.polling import eventually

from .conftest import serving

LINGER = http1server._LINGER


async def echo(request: Request) -> Reply:
    return Reply(body=request.method.encode() + b" " + request.path.encode() + b" " + request.body)


ROUTES = {"/echo": {"GET": echo, "POST": echo}}


@pytest.fixture(params=["record-sized", "stdlib"])
def tls_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a TLS connection is served: ours (runtime/tlsconn.py), and the standard
    library's on an interpreter whose asyncio has another shape."""
    if request.param == "stdlib":
        monkeypatch.setattr(http1server, "shape_problem", lambda: "another shape")
        monkeypatch.setattr(http1server, "_warned_stdlib_tls", True)
    return str(request.param)


def read_answer(tls: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += tls.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += tls.recv(65536)
    return head + b"\r\n\r\n" + body


def after_the_answer(tls: ssl.SSLSocket) -> str:
    """What the server sends after its answer, seen by a client that does not close: its
    close_notify (a clean TLS end), a TCP end without one, a reset, or nothing."""
    try:
        more = tls.recv(1)
    except ssl.SSLEOFError:
        return "EOF without close_notify"
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return "nothing"
    return "close_notify" if more == b"" else f"more data {more!r}"


def tls_client(port: int) -> ssl.SSLSocket:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    tls = client.wrap_socket(raw, suppress_ragged_eofs=False)
    tls.settimeout(10)
    return tls


def close_exchange(port: int, request: bytes, extra: bytes = b"") -> tuple[bytes, str, float]:
    """Send `request` (then `extra`, while the server may be refusing it), read the answer;
    what came after it and how many seconds after."""
    tls = tls_client(port)
    try:
        tls.sendall(request)
        if extra:
            tls.sendall(extra)
        answer = read_answer(tls)
        answered = time.monotonic()
        outcome = after_the_answer(tls)
        return answer, outcome, time.monotonic() - answered
    finally:
        tls.close()


async def test_a_tls_client_gets_close_notify_at_once_after_an_answer_that_closes(
    context: ssl.SSLContext, tls_path: str
) -> None:
    async with serving(ROUTES, tls=context) as http:
        assert http.port is not None
        answer, outcome, seconds = await asyncio.to_thread(
            close_exchange, http.port, b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"Connection: close" in answer
    # Before: nothing until the client closed or the linger's 2 s ran out, then no close_notify.
    assert outcome == "close_notify"
    assert seconds < LINGER


async def test_a_refused_tls_client_still_sending_its_body_reads_the_whole_answer(
    context: ssl.SSLContext,
) -> None:
    """Ours only: the stdlib's shutdown drops a client that sends after our close_notify
    (runtime/tlsconn.py, `RecordSizedSSLProtocol._do_shutdown`)."""
    async with serving(ROUTES, tls=context, max_body=1000) as http:
        assert http.port is not None
        answer, outcome, _ = await asyncio.to_thread(
            close_exchange,
            http.port,
            b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000000\r\n\r\n",
            b"x" * 256 * 1024,
        )
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert answer.endswith(b"request body too large\n")
    assert outcome == "close_notify"  # the rest of its body was read and dropped


async def test_a_tls_client_that_never_sends_close_notify_is_closed_after_the_linger(
    context: ssl.SSLContext, tls_path: str
) -> None:
    """The close waits for the client's close_notify at most the linger, not asyncio's 30 s."""
    async with serving(ROUTES, tls=context) as http:
        assert http.port is not None
        tls = await asyncio.to_thread(tls_client, http.port)
        try:
            tls.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            await asyncio.to_thread(read_answer, tls)
            assert await asyncio.to_thread(after_the_answer, tls) == "close_notify"
            began = time.monotonic()
            await eventually(
                lambda: not http._connections, "not http._connections", LINGER + 10, interval=0.005
            )
            assert time.monotonic() - began < LINGER + 5
        finally:
            tls.close()


def _tcp_state(sock: socket.socket) -> int:
    state: int = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
    return state


_TCP_CLOSE = 7


async def test_a_client_that_resets_after_its_answer_was_written_costs_no_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer is written, then the client's reset arrives before our FIN: ``write_eof``
    meets a socket with no connection (ENOTCONN). The reset is put exactly there (a real RST
    from a real socket, its arrival waited for in the kernel's TCP state)."""
    outcomes: list[str] = []
    errors: list[dict[str, Any]] = []
    original = _ServerConnection._linger
    holder: dict[str, socket.socket] = {}

    def linger_after_a_reset(self: _ServerConnection) -> None:
        transport = self._transport
        assert transport is not None
        server_side = transport.get_extra_info("socket")
        sock = holder.pop("client", None)
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST
            deadline = time.monotonic() + 10
            while _tcp_state(server_side) != _TCP_CLOSE and time.monotonic() < deadline:
                time.sleep(0.001)
            outcomes.append(f"state {_tcp_state(server_side)}")
        try:
            original(self)
        except BaseException as error:
            outcomes.append(f"raised {type(error).__name__}")
            raise
        outcomes.append("returned")

    monkeypatch.setattr(_ServerConnection, "_linger", linger_after_a_reset)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda loop, context: errors.append(context))
    try:
        async with serving(ROUTES) as http:
            assert http.port is not None
            sock = socket.create_connection(("127.0.0.1", http.port), timeout=10)
            holder["client"] = sock
            sock.sendall(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            await eventually(
                lambda: "returned" in outcomes or any("raised" in o for o in outcomes),
                '"returned" in outcomes or any("raised" in o for o in outcomes)',
                10.0,
                interval=0.005,
            )
            await eventually(
                lambda: not http._connections, "not http._connections", 10.0, interval=0.005
            )
            # The server goes on serving.
            reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
            writer.write(b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 200 ")
            writer.close()
    finally:
        loop.set_exception_handler(None)
    assert outcomes[:2] == [f"state {_TCP_CLOSE}", "returned"]  # then the second client's
    assert errors == []


# ---- request lines
async def next_status(reader: asyncio.StreamReader) -> int | None:
    """The status of the next answer, or None when the server closed instead. The bound is for
    a server that neither answers nor closes, a failure; no test waits it out."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return None
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return int(head.split(b" ")[1])


async def exchange(
    port: int, data: bytes, answers: int, *, chunk: int = 0
) -> tuple[list[int | None], bool]:
    """Send `data` (in pieces of `chunk` bytes, each drained, if given) and read `answers`
    answers; then whether the server closed: a further request on the connection is answered
    (open) or meets the end of the stream (closed). Asking, not waiting for a silence, is what
    tells an open connection from a slow close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
        statuses = [await next_status(reader) for _ in range(answers)]
        try:
            writer.write(GOOD)
            await writer.drain()
        except ConnectionResetError:
            return statuses, True
        probe = await next_status(reader)
        assert probe in (None, 200), probe
        return statuses, probe is None
    finally:
        writer.close()


GOOD = b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"
POST = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 12\r\n\r\nGET  / \r\n\r\n\n"  # a body like a head  # noqa: E501


@pytest.mark.parametrize(
    ("data", "statuses", "closed"),
    [
        (b"GET  /echo HTTP/1.1\r\nHost: t\r\n\r\n", [400], True),  # two spaces after the method
        (b"GET /echo  HTTP/1.1\r\nHost: t\r\n\r\n", [400], True),  # two before the version
        (b"GET   /echo   HTTP/1.1\r\nHost: a\r\n\r\n", [400], True),
        (
            GOOD + b"GET  /echo HTTP/1.1\r\nHost: t\r\n\r\n" + GOOD,
            [200, 400],
            True,
        ),  # one read, pipelined
        (POST + POST + b"GET /echo  HTTP/1.1\r\nHost: t\r\n\r\n", [200, 200, 400], True),
        (POST + GOOD + GOOD, [200, 200, 200], False),  # a body that looks like a head is a body
        (b"\r\n" + GOOD, [200], False),  # an empty line before a request line is skipped
        (GOOD + b"\r\n\r\n" + GOOD, [200, 200], False),
        (
            b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET  / x\r\n\r\n",
            [200],
            True,
        ),
    ],
)
async def test_a_request_line_is_method_space_target_space_version_as_go_reads_it(
    data: bytes, statuses: list[int], closed: bool
) -> None:
    async with serving(ROUTES, header_timeout=60) as http:
        assert http.port is not None
        answers = len(statuses)
        assert await exchange(http.port, data, answers) == (statuses, closed)
        assert await exchange(http.port, data, answers, chunk=1) == (statuses, closed)  # split
        assert await exchange(http.port, data, answers, chunk=7) == (statuses, closed)
        assert await exchange(http.port, GOOD, 1) == ([200], False)  # the server goes on


async def test_a_refused_line_among_pipelined_requests_frees_their_bodies_budget() -> None:
    async with serving(ROUTES, header_timeout=60) as http:
        assert http.port is not None
        data = POST * 3 + b"GET  /echo HTTP/1.1\r\nHost: t\r\n\r\n"
        assert await exchange(http.port, data, 4) == ([200, 200, 200, 400], True)
        await eventually(
            lambda: not http._connections, "not http._connections", 10.0, interval=0.005
        )
        assert http.body_budget.used == 0
