"""Event-loop lag: how late a timer fires, measured continuously.

Why: everything in this controller shares one asyncio loop in one thread. Synchronous CPU work
(a big relist parse, a full GC with a large cache, a slow
reconcile) freezes every watch, the probes and the lease renewal at once. The lag of a periodic
wake-up is the direct measure of such a stall: if a sleep of `interval` seconds returns `lag`
seconds late, nothing else on the loop could run during that time either.

`LoopLagMonitor.run()` sleeps `interval` (0.25 s by default), then records how much later than
planned it woke:

- `jobset_event_loop_lag_seconds` (gauge): the latest measurement;
- `jobset_event_loop_lag_distribution_seconds` (histogram): every measurement, buckets 1 ms to
  10 s (10 s is the lease's renewDeadline: a lag near it loses leadership);
- `max_lag` / `last_lag` attributes: the worst and latest lag seen, for benchmarks;
- a warning log line for any lag above `warn_threshold` (1 s by default).

The timer's own slack (about a millisecond) is measured too, so the floor is not zero. A stall
shorter than `interval` that falls between two wake-ups delays only the next wake-up partly and
is under-reported; lower the interval for finer measurements.

Idle backoff: while the process is idle (it used under 5% of a CPU since the previous wake-up)
the interval doubles up to `idle_interval` (1 s); any busy period brings it back to `interval`
at once. Why: on a small VM each wake-up of an otherwise idle loop costs about 0.2 ms of CPU,
and four a second were nearly all of an idle controller's CPU. An idle loop has no stall to
measure; the cost is that a stall starting out of idleness is under-reported by up to the
remaining sleep (at most `idle_interval`), then measured at full rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog
from prometheus_client import CollectorRegistry, Gauge, Histogram

from jobset_controller.runtime.clock import Clock, RealClock

log = structlog.get_logger("looplag")

DEFAULT_INTERVAL: Final = 0.25
DEFAULT_IDLE_INTERVAL: Final = 1.0
# Below this share of one CPU between two wake-ups the process counts as idle.
IDLE_CPU_SHARE: Final = 0.05
LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopLagMonitor:
    """Measures the event loop's lag until cancelled; see the module docstring."""

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        warn_threshold: float = 1.0,
        idle_interval: float = DEFAULT_IDLE_INTERVAL,
        cpu_time: Callable[[], float] = time.process_time,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self.idle_interval = max(idle_interval, interval)
        self._cpu_time = cpu_time
        self.warn_threshold = warn_threshold
        self._clock: Clock = clock or RealClock()
        self.last_lag = 0.0
        self.max_lag = 0.0
        self.samples = 0
        self._gauge = Gauge(
            "jobset_event_loop_lag_seconds",
            "How late the latest periodic wake-up of the event loop ran, in seconds.",
            registry=registry,
        )
        self._histogram = Histogram(
            "jobset_event_loop_lag_distribution_seconds",
            "How late periodic wake-ups of the event loop ran, in seconds.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )

    async def run(self) -> None:
        """Sleep, measure, repeat, until cancelled (longer sleeps while idle: module docstring)."""
        interval = self.interval
        while True:
            started, cpu = self._clock.now(), self._cpu_time()
            planned = started + interval
            await self._clock.sleep(interval)
            now = self._clock.now()
            self.observe(max(0.0, now - planned))
            idle = self._cpu_time() - cpu < IDLE_CPU_SHARE * (now - started)
            interval = min(interval * 2, self.idle_interval) if idle else self.interval

    def observe(self, lag: float) -> None:
        """Record one measurement (called by `run`)."""
        self.last_lag = lag
        self.max_lag = max(self.max_lag, lag)
        self.samples += 1
        self._gauge.set(lag)
        self._histogram.observe(lag)
        if lag > self.warn_threshold:
            log.warning("event loop was blocked", lag_seconds=round(lag, 3))

    def reset_max(self) -> float:
        """Return the worst lag seen so far and start a new maximum (for benchmark phases)."""
        worst, self.max_lag = self.max_lag, 0.0
        return worst
