"""Hand the heap's free pages back to the operating system once a burst of work is over.

Why: the start of a controller is its busiest minute. Every cached object passes through a
parsed list page, a transform and one reconcile pass; all of that is garbage a moment later, but
glibc's malloc keeps the freed memory (the long-lived cache entries sit between the freed
chunks, so the heap's top cannot shrink). RSS then stays at the start's peak for the life of the
process. `malloc_trim(0)` releases every free page, also those in the middle of the heap
(glibc >= 2.8, with `madvise(MADV_DONTNEED)`); it costs a few milliseconds per 100 MiB and
changes nothing that is in use. hack/bench/scale_bench.py measures the effect.

Only on glibc (the image's Debian base); elsewhere `malloc_trim` answers False and nothing runs.
"""

from __future__ import annotations

import ctypes
import os
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
