"""An event loop on a thread of its own, driven from the main loop.

Why: the admission webhooks sit on the create path of every JobSet pod, and the main loop also
runs the reconciles. A pass over a JobSet of a thousand Jobs holds the loop for tens of
milliseconds at a time, and a review that arrives meanwhile waits for it (docs/benchmarks.md,
admission at a rate, busy). Served from a loop on another thread, a review waits at most for
the interpreter to hand over its lock: the running thread is asked to let go after the switch
interval (`SWITCH_INTERVAL`), not after its step.

Guarantees:
- `start()` returns once the loop runs; `call(fn)` runs the coroutine `fn()` on that loop and
  returns (or raises) what it does, on the caller's loop; a caller cancelled meanwhile cancels it;
- `stop()` cancels what still runs there, closes the loop and joins the thread; safe to call
  twice, or without a start;
- `on_loop(loop, fn)` is the way back: `fn`'s coroutines, called from the thread, run on `loop`
  (the API client belongs to the main loop).

What runs on the thread must read shared state only in ways that are safe while the main thread
changes it (see where the webhook server's lookups are built: runtime/informer.py `Store.by_index`,
controller/domain_nodes.py).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

# The longest a thread waits for the interpreter lock while another runs Python code (CPython's
# default is 5 ms). A review's path gives the lock up at each socket and TLS call and takes it
# back after: at 5 ms each, a handful of waits is a busy p99 of tens of milliseconds.
SWITCH_INTERVAL = 0.001


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._loop

    def start(self) -> None:
        if self._thread is not None:
            return
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        loop = asyncio.new_event_loop()
        running = threading.Event()
        loop.call_soon(running.set)
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
        self._thread.start()
        running.wait()

    async def call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        future = asyncio.run_coroutine_threadsafe(fn(), self.loop)
        return await asyncio.wrap_future(future)

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        if not loop.is_closed():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_cancel_all(), loop))
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()


async def _cancel_all() -> None:
    """Cancel every other task of the running loop and wait for them to end."""
    me = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def on_loop(
    loop: asyncio.AbstractEventLoop, fn: Callable[P, Awaitable[T]]
) -> Callable[P, Awaitable[T]]:
    """`fn`, whose coroutines run on `loop` whichever loop awaits them."""

    async def on(*args: P.args, **kwargs: P.kwargs) -> T:
        async def run() -> T:
            return await fn(*args, **kwargs)

        if asyncio.get_running_loop() is loop:
            return await run()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))

    return on
