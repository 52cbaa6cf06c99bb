"""An event loop on a thread of its own, driven from the main loop.

Why: the admission webhooks sit on the create path of every JobSet pod, and the main loop also
runs the reconciles. A pass over a JobSet of a thousand Jobs holds the loop for tens of
milliseconds at a time, and a review that arrives meanwhile waits for it (docs/benchmarks.md,
admission at a rate, busy). Served from a loop on another thread, a review waits for the
interpreter to hand over its lock, which the running thread is asked to do after the switch
interval, not after its step: 1 ms while a reconcile runs, CPython's 5 ms otherwise
(runtime/switchinterval.py says why). Measured (docs/benchmarks.md, "Admission on a thread of
its own"): the busy p99 at 200 reviews a second fell from 39-44 ms to 15-16 ms. The price is
closed-loop throughput (every handover of the lock costs): 7-18% lower idle, 30-67% lower
while a reconcile is busy.

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
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


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
        loop = asyncio.new_event_loop()
        running = threading.Event()
        loop.call_soon(running.set)
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
        self._thread.start()
        running.wait()

    async def call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return await _run_on(self.loop, fn())

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        if not loop.is_closed():
            await _run_on(loop, _cancel_all())
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()


async def _run_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on `loop` (another thread's) and await its outcome here; cancelling the
    awaiting task cancels it there."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


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
        if asyncio.get_running_loop() is loop:
            return await fn(*args, **kwargs)

        async def run() -> T:  # a coroutine of `fn`'s awaitable, for run_coroutine_threadsafe
            return await fn(*args, **kwargs)

        return await _run_on(loop, run())

    return on
