"""An event loop on a thread of its own (runtime/loopthread.py): what the webhook server runs on,
so that a long step of the main loop does not hold up an admission answer."""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.http1server import HttpServer, Reply, Request
from jobset_controller.runtime.loopthread import LoopThread, on_loop
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem

# A bound for waits that a working implementation ends at once; never slept.
WITHIN = 30.0


@pytest.fixture
async def thread() -> AsyncIterator[LoopThread]:
    started = LoopThread("test-loop")
    started.start()
    try:
        yield started
    finally:
        await started.stop()


async def test_call_runs_the_coroutine_on_the_thread_and_returns_its_result(
    thread: LoopThread,
) -> None:
    async def where() -> tuple[int, asyncio.AbstractEventLoop]:
        return threading.get_ident(), asyncio.get_running_loop()

    ident, loop = await thread.call(where)
    assert ident != threading.get_ident()
    assert loop is thread.loop


async def test_an_exception_on_the_thread_is_raised_to_the_caller(thread: LoopThread) -> None:
    async def refuse() -> None:
        raise OSError("address in use")

    with pytest.raises(OSError, match="address in use"):
        await thread.call(refuse)


async def test_cancelling_the_caller_cancels_the_coroutine_on_the_thread(
    thread: LoopThread,
) -> None:
    entered, cancelled = threading.Event(), threading.Event()

    async def wait_for_ever() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    caller = asyncio.create_task(thread.call(wait_for_ever))
    assert await asyncio.to_thread(entered.wait, WITHIN)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert await asyncio.to_thread(cancelled.wait, WITHIN)


async def test_stop_cancels_what_still_runs_and_ends_the_thread() -> None:
    thread = LoopThread("test-stop")
    await thread.stop()  # never started: nothing to do
    thread.start()
    cancelled = threading.Event()

    async def wait_for_ever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def spawn() -> None:
        asyncio.get_running_loop().create_task(wait_for_ever())

    await thread.call(spawn)
    names = {t.name for t in threading.enumerate()}
    assert "test-stop" in names
    await thread.stop()
    assert cancelled.is_set()
    assert "test-stop" not in {t.name for t in threading.enumerate()}
    await thread.stop()  # twice: nothing more
    with pytest.raises(RuntimeError, match="not started"):
        thread.loop  # noqa: B018 (the property is what is tested)


async def test_on_loop_runs_the_function_on_its_loop_when_called_from_the_thread(
    thread: LoopThread,
) -> None:
    main = asyncio.get_running_loop()

    async def which(label: str) -> tuple[str, asyncio.AbstractEventLoop]:
        return label, asyncio.get_running_loop()

    back = on_loop(main, which)

    async def from_thread() -> tuple[str, asyncio.AbstractEventLoop]:
        return await back("claim")

    assert await thread.call(from_thread) == ("claim", main)
    assert await back("here") == ("here", main)  # on its own loop already: called directly


async def test_a_server_on_the_thread_answers_while_the_main_loop_is_held(
    thread: LoopThread, tmp_path: Path
) -> None:
    """The main loop is held by a step that ends only once a TLS request to the server on the
    thread has been answered: had the server needed the main loop, the step would wait for
    ever (bounded here by WITHIN, and the test fails)."""
    cert, key = self_signed_pem()
    (tmp_path / CERT_FILE).write_bytes(cert)
    (tmp_path / KEY_FILE).write_bytes(key)

    async def ok(request: Request) -> Reply:
        return Reply.text(f"answered on {threading.current_thread().name}")

    server = HttpServer({"/review": {"POST": ok}}, name="test", tls=pair_context(tmp_path))
    await thread.call(lambda: server.start("127.0.0.1", 0))
    assert server.port is not None
    answers: list[tuple[int, bytes]] = []
    answered = threading.Event()

    def client() -> None:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection(
            "127.0.0.1", server.port, context=context, timeout=WITHIN
        )
        try:
            conn.request("POST", "/review", body=b"{}")
            response = conn.getresponse()
            answers.append((response.status, response.read()))
        finally:
            conn.close()
            answered.set()

    asker = threading.Thread(target=client)
    asker.start()
    try:
        # The main loop's long step: a blocking wait, no await, until the answer is in.
        assert answered.wait(WITHIN), "no answer while the main loop was held"
    finally:
        asker.join(WITHIN)
        await thread.call(server.stop)
    assert answers == [(200, b"answered on test-loop")]
