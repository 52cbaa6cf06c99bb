"""CPython's switch interval: short while the main loop reconciles, the default otherwise.

Why: the webhook server answers on a thread of its own (runtime/loopthread.py). Every socket
call it makes hands the interpreter's lock over, and while the main thread is busy (a reconcile
pass, the informers taking in its Jobs' events) the webhook thread waits for it to come back
for up to the switch interval, CPython's 5 ms, once per hand-over: a review takes it back after
its `epoll_wait`, its `recv` and its `send`. A pass over a 5000-Job JobSet keeps the main thread
busy long enough for a review to wait three or four times (measured 2026-11-30 with a probe
thread in the controller: waits of 5-12 ms, and a busy p99 of 18-29 ms at 60 and 200 reviews a
second; with a 1 ms interval 11-14 ms). The short interval is not kept all the time: with the
main loop idle it cost 26-42% of the closed-loop review throughput (docs/benchmarks.md,
"Admission on a thread of its own"), and bought nothing, since nothing else wants the lock.

Guarantees:
- while at least one `busy()` block is open, the interval is `interval` (1 ms); when the last
  one closes, the interval found when the first opened is back;
- blocks may overlap and nest (several workers, several controllers, one process): they count;
- it is used from one thread (the main loop's workers), so it takes no lock.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

BUSY_INTERVAL = 0.001


class SwitchInterval:
    def __init__(
        self,
        interval: float = BUSY_INTERVAL,
        *,
        get: Callable[[], float] = sys.getswitchinterval,
        set_: Callable[[float], None] = sys.setswitchinterval,
    ) -> None:
        self.interval = interval
        self._get, self._set = get, set_
        self._open = 0
        self._before = 0.0

    @property
    def open(self) -> int:
        """How many `busy()` blocks are open now."""
        return self._open

    @contextmanager
    def busy(self) -> Iterator[None]:
        if self._open == 0:
            self._before = self._get()
            self._set(self.interval)
        self._open += 1
        try:
            yield
        finally:
            self._open -= 1
            if self._open == 0:
                self._set(self._before)
