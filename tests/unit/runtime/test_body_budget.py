"""The servers' total budget for request bodies (runtime/http1server.py `BodyBudget`), seen from
clients on real sockets: a body that does not fit waits, unread, until others are answered, and
gets 503 if its time runs out first; nothing is allocated past the budget but one read."""

from __future__ import annotations

import asyncio
import threading
from contextlib import AbstractAsyncContextManager

import pytest
from tests.unit.runtime.conftest import serving

from jobset_controller.runtime.http1server import BodyBudget, HttpServer, Reply, Request
from jobset_controller.runtime.loopthread import LoopThread
from jobset_controller_dev.envtest.polling import eventually


class Gate:
    """A handler that holds every request until released, so its body stays reserved."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.seen: list[bytes] = []

    async def handle(self, request: Request) -> Reply:
        self.seen.append(request.body)
        await self.open.wait()
        return Reply(body=b"got %d" % len(request.body))


def server(
    budget: BodyBudget, gate: Gate, header_timeout: float = 10.0
) -> AbstractAsyncContextManager[HttpServer]:
    """`/hold` held by `gate`, bodies up to the whole `budget`."""
    return serving(
        {"/hold": {"POST": gate.handle}},
        max_body=budget.total,
        body_budget=budget,
        header_timeout=header_timeout,
    )


async def send(
    port: int, size: int, *, body: bool = True
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A POST of `size` bytes; with `body` False only its head (the body is sent later)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
    if body:
        await writer.drain()
        writer.write(b"b" * size)
    return reader, writer


async def answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await reader.readexactly(length)


async def test_a_body_that_does_not_fit_the_budget_waits_until_another_is_answered() -> None:
    budget, gate = BodyBudget(1000), Gate()
    async with server(budget, gate) as http:
        assert http.port is not None
        first, first_writer = await send(http.port, 800)
        await eventually(
            lambda: len(gate.seen) == 1, "len(gate.seen) == 1", 10.0, interval=0.005
        )  # its handler holds 800 bytes
        second, second_writer = await send(http.port, 500, body=False)
        await eventually(lambda: budget.waiting == 1, "budget.waiting == 1", 10.0, interval=0.005)
        second_writer.write(b"b" * 500)  # not read while it waits
        assert len(gate.seen) == 1
        assert budget.used == 800
        gate.open.set()
        assert (await answer(first)).endswith(b"got 800")
        assert (await answer(second)).endswith(b"got 500")
        await eventually(lambda: budget.used == 0, "budget.used == 0", 10.0, interval=0.005)
        first_writer.close()
        second_writer.close()


async def test_a_body_still_waiting_when_its_time_runs_out_is_answered_503() -> None:
    budget, gate = BodyBudget(1000), Gate()
    async with server(budget, gate, header_timeout=0.3) as http:
        assert http.port is not None
        first, first_writer = await send(http.port, 900)
        await eventually(lambda: len(gate.seen) == 1, "len(gate.seen) == 1", 10.0, interval=0.005)
        second, second_writer = await send(http.port, 200, body=False)
        busy = await answer(second)
        assert busy.startswith(b"HTTP/1.1 503 ")
        assert b"Connection: close" in busy
        assert await asyncio.wait_for(second.read(), 10) == b""  # closed after the answer
        assert budget.waiting == 0
        gate.open.set()
        assert (await answer(first)).endswith(b"got 900")  # the one that fitted is unharmed
        first_writer.close()
        second_writer.close()


async def test_a_body_that_fits_goes_ahead_of_a_larger_one_that_waits() -> None:
    budget, gate = BodyBudget(1000), Gate()
    async with server(budget, gate) as http:
        assert http.port is not None
        _, first_writer = await send(http.port, 600)
        await eventually(lambda: len(gate.seen) == 1, "len(gate.seen) == 1", 10.0, interval=0.005)
        _, large_writer = await send(http.port, 700, body=False)
        await eventually(lambda: budget.waiting == 1, "budget.waiting == 1", 10.0, interval=0.005)
        large_writer.write(b"b" * 700)
        _, small_writer = await send(http.port, 300, body=False)
        small_writer.write(b"b" * 300)
        await eventually(
            lambda: len(gate.seen) == 2, "len(gate.seen) == 2", 10.0, interval=0.005
        )  # served, though the large one came first
        assert gate.seen[1] == b"b" * 300
        assert budget.waiting == 1
        gate.open.set()
        await eventually(lambda: len(gate.seen) == 3, "len(gate.seen) == 3", 10.0, interval=0.005)
        for writer in (first_writer, large_writer, small_writer):
            writer.close()


async def test_a_client_that_leaves_gives_its_reservation_back() -> None:
    budget, gate = BodyBudget(1000), Gate()
    async with server(budget, gate) as http:
        assert http.port is not None
        _, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 900\r\n\r\n" + b"b" * 100)
        await eventually(
            lambda: budget.used == 900, "budget.used == 900", 10.0, interval=0.005
        )  # reserved when the head was in
        writer.transport.abort()
        await eventually(lambda: budget.used == 0, "budget.used == 0", 10.0, interval=0.005)
        _, waiting = await send(http.port, 900)  # and another body gets it
        await eventually(lambda: len(gate.seen) == 1, "len(gate.seen) == 1", 10.0, interval=0.005)
        gate.open.set()
        waiting.close()


async def test_100_continue_waits_for_the_budget() -> None:
    budget, gate = BodyBudget(1000), Gate()
    async with server(budget, gate) as http:
        assert http.port is not None
        _, first_writer = await send(http.port, 1000)
        await eventually(lambda: len(gate.seen) == 1, "len(gate.seen) == 1", 10.0, interval=0.005)
        reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(
            b"POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n"
        )
        await eventually(lambda: budget.waiting == 1, "budget.waiting == 1", 10.0, interval=0.005)
        gate.open.set()  # the first is answered, its budget freed: now the client may send
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == (
            b"HTTP/1.1 100 Continue\r\n\r\n"
        )
        writer.write(b"b" * 10)
        assert (await answer(reader)).endswith(b"got 10")
        first_writer.close()
        writer.close()


async def test_a_body_that_came_whole_with_its_head_is_served_and_charged() -> None:
    """Holding back what is already here frees nothing: it is served, and counted, so the
    next body waits for it."""
    budget, gate = BodyBudget(1000), Gate()
    async with server(budget, gate) as http:
        assert http.port is not None
        _, first_writer = await send(http.port, 900)
        await eventually(lambda: len(gate.seen) == 1, "len(gate.seen) == 1", 10.0, interval=0.005)
        _, writer = await asyncio.open_connection("127.0.0.1", http.port)
        writer.write(b"POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 300\r\n\r\n" + b"b" * 300)
        await eventually(lambda: len(gate.seen) == 2, "len(gate.seen) == 2", 10.0, interval=0.005)
        assert budget.used == 1200  # over the total by what came in one read
        _, third_writer = await send(http.port, 100, body=False)
        await eventually(lambda: budget.waiting == 1, "budget.waiting == 1", 10.0, interval=0.005)
        third_writer.write(b"b" * 100)
        gate.open.set()
        await eventually(lambda: len(gate.seen) == 3, "len(gate.seen) == 3", 10.0, interval=0.005)
        await eventually(lambda: budget.used == 0, "budget.used == 0", 10.0, interval=0.005)
        for w in (first_writer, writer, third_writer):
            w.close()


def test_a_server_whose_largest_body_exceeds_the_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds the body budget"):
        HttpServer({}, name="test", max_body=2000, body_budget=BodyBudget(1000))


async def test_a_waiter_on_another_threads_loop_is_granted_on_that_loop() -> None:
    """The webhook server waits for the budget on its own thread's loop; a release by a server
    on the main loop hands it the reservation on the webhook's loop, never on the releaser's."""
    budget = BodyBudget(1000)
    assert budget.reserve(800, lambda size: None)
    thread = LoopThread("test-budget-waiter")
    thread.start()
    granted: list[tuple[int, str]] = []
    got = threading.Event()

    def on_grant(size: int) -> None:
        granted.append((size, threading.current_thread().name))
        got.set()

    async def wait_in_thread() -> bool:
        return budget.reserve(500, on_grant)

    try:
        assert not await thread.call(wait_in_thread)  # queued: 800 + 500 > 1000
        budget.release(800)  # on the main loop
        assert await asyncio.to_thread(got.wait, 30)
    finally:
        await thread.stop()
    assert granted == [(500, "test-budget-waiter")]
    assert budget.used == 500
    assert budget.waiting == 0
