"""Hand the heap's free pages back to the operating system once a burst of work is over.

Why: the start of a controller is its busiest minute. Every cached object passes through a
parsed list page, a transform and one reconcile pass; all of that is garbage a moment later, but
glibc's malloc keeps the freed memory (the long-lived cache entries sit between the freed
chunks, so the heap's top cannot shrink). RSS then stays at the start's peak for the life of the
process. `malloc_trim(0)` releases every free page, also those in the middle of the heap
(glibc >= 2.8, with `madvise(MADV_DONTNEED)`); it costs a few milliseconds per 100 MiB and
changes nothing that is in use. hack/bench/scale_bench.py measures the effect.

The same holds after a burst of closed connections (`TrimAfterCloses`, used by the servers in
runtime/http1server.py): each held buffers that are free heap once it is gone.

Only glibc (the image's Debian base) has `malloc_trim`; elsewhere `malloc_trim()` answers False
and frees nothing, but the rest still runs: `trim_once_quiet` still waits for the quiet and logs
its line (`trimmed=False`), and `TrimAfterCloses` still runs its full garbage collection (which
frees closed connections' reference cycles on any C library) and logs its line.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import threading
import time
from collections.abc import Callable

import structlog

from jobset_controller.runtime.clock import Clock

log = structlog.get_logger("memory")

# How long the work queue must stay idle before the trim (seconds), and how often it is checked.
QUIET_FOR = 2.0
CHECK_EVERY = 0.5


def malloc_trim() -> bool:
    """glibc's malloc_trim(0); False where there is no such function (not glibc)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def resident_bytes() -> int:
    """This process's RSS from /proc (0 where there is no /proc)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


async def trim_once_quiet(
    idle: Callable[[], bool],
    clock: Clock,
    *,
    quiet_for: float = QUIET_FOR,
    check_every: float = CHECK_EVERY,
    trim: Callable[[], bool] = malloc_trim,
) -> bool:
    """Wait until `idle()` has held for `quiet_for` seconds (checked every `check_every`), then
    trim once; returns what `trim` answered. The start's burst is the one worth it: later work
    comes in small pieces whose garbage malloc reuses."""
    quiet_since: float | None = None
    while True:
        now = clock.now()
        if not idle():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_for:
            break
        await clock.sleep(check_every)
    before = resident_bytes()
    trimmed = trim()
    log.info(
        "start-up memory returned to the OS",
        trimmed=trimmed,
        rss_before_mib=round(before / 2**20, 1),
        rss_after_mib=round(resident_bytes() / 2**20, 1),
    )
    return trimmed


class TrimAfterCloses:
    """Hands freed connection memory back to the OS after a burst of closed connections.

    Why: a connection's buffers (its TLS state, OpenSSL's record and handshake buffers, a request
    body) are malloc'd between longer-lived objects; when a thousand connections close at once,
    glibc keeps their memory as free heap and RSS stays at the burst's peak for the life of the
    process (issue 24: 594 MiB after 1000 slow TLS clients had gone). `malloc_trim(0)` gives
    the free pages back. Before it, a full pass of the cyclic garbage collector: asyncio's
    socket transport keeps a bound method of itself (``_read_ready_cb``), so every closed
    connection's transport, socket and their dicts are a reference cycle, freed only by a
    collection of the oldest generation, which Python runs rarely (measured: 4000 closed
    connections kept ~9 MiB until one ran). The pass scans only what `gc.freeze()` has not
    set aside (the manager freezes the caches' start-up objects). Both take a few
    milliseconds on the event loop (logged as `ms`), so they run only after `burst`
    connections have closed since the last trim, `settle` seconds
    after the close that reached that count (the rest of a burst closes meanwhile), and at most
    once every `every` seconds: a client that opens and closes connections for ever costs at
    most one trim per `every` seconds. Servers call `closed()` once per connection that ends.
    """

    def __init__(
        self,
        *,
        burst: int = 256,
        settle: float = 1.0,
        every: float = 10.0,
        trim: Callable[[], bool] = malloc_trim,
        collect: Callable[[], int] = gc.collect,
    ) -> None:
        self.burst, self.settle, self.every = burst, settle, every
        self._trim, self._collect = trim, collect
        self._closed = 0
        self._last = float("-inf")  # loop.time() of the last trim (monotonic, shared by loops)
        self._handle: asyncio.TimerHandle | None = None
        self._handle_loop: asyncio.AbstractEventLoop | None = None
        self.trims = 0
        self._lock = threading.Lock()

    def closed(self) -> None:
        """One connection ended (on any thread's loop: the webhook server has a thread of its
        own). A trim due on a loop that still runs stands for every loop's closes; one due on a
        loop that has closed (a test's earlier loop) never runs, so another is scheduled here."""
        with self._lock:
            self._closed += 1
            if self._closed < self.burst:
                return
            loop = asyncio.get_running_loop()
            due = self._handle_loop
            if self._handle is not None and due is not None and not due.is_closed():
                return  # one is already due
            delay = max(self.settle, self._last + self.every - loop.time())
            self._handle, self._handle_loop = loop.call_later(delay, self._run), loop

    def _run(self) -> None:
        with self._lock:
            self._handle = self._handle_loop = None
            closed, self._closed = self._closed, 0
        before = resident_bytes()
        started = time.perf_counter()
        collected = self._collect()
        trimmed = self._trim()
        self._last = asyncio.get_running_loop().time()
        self.trims += 1
        log.debug(
            "connection memory returned to the OS",
            closed=closed,
            collected=collected,
            trimmed=trimmed,
            ms=round((time.perf_counter() - started) * 1000, 1),
            rss_before_mib=round(before / 2**20, 1),
            rss_after_mib=round(resident_bytes() / 2**20, 1),
        )
