"""The cyclic garbage collector's thresholds for a long-lived controller process.

Why: with CPython's first threshold (a collection every 700 net allocations of tracked
objects), a pass over a 5000-Job JobSet keeps catching its own live objects (the Jobs it
builds and reads) in young collections and promoting them, and the oldest generation's full
collection then runs every second or two, 4-58 ms each, holding the interpreter's lock; every
webhook answer due meanwhile waits behind it. Measured 2026-11-30 (a `gc.callbacks` probe in
the controller, hack/bench/admission_bench.py at 200 reviews a second while a 5000-Job JobSet
reconciles): 7 full collections of 12-54k objects in a run of four cells and a p99 of
13-49 ms; with 10000 at most one, and a p99 of 9.9-15.2 ms (docs/benchmarks.md, "The lock back
sooner").

The cost is bounded: only garbage in reference cycles waits for the collector (everything else
goes when its last reference does), and a young collection still runs every 10000 net
allocations, so at most that many young objects (a few MiB) wait longer; measured +0.5 MiB of
idle RSS. The older generations' thresholds stay CPython's.
"""

from __future__ import annotations

import gc
from typing import Final

THRESHOLDS: Final = (10_000, 10, 10)


def set_thresholds() -> None:
    """Set `THRESHOLDS` for this process (the `run` command does, once, before its loop)."""
    gc.set_threshold(*THRESHOLDS)
