"""An asyncio work queue of keys, with client-go's guarantees.

Producers (event handlers, timers, failed reconciles) add keys; N worker tasks `get` a key,
reconcile it, and call `done`. Keys are hashable values such as "namespace/name".

Guarantees (each is pinned by a test named after it):

1. Stingy: a key added many times before a worker takes it is handed out once (the dirty set).
2. One worker per key: a key is never held by two workers at once (the processing set). A key
   added while a worker holds it is not handed out again until that worker calls `done(key)`;
   then it is queued once more, so the change that caused the add is never lost.
3. Fair: distinct keys are handed out in the order they were first added (FIFO).
4. Delayed adds: `add_after(key, delay)` adds the key once `delay` seconds have passed on the
   injected clock. A delay of zero or less adds at once. If the key is already waiting, the
   earlier of the two times wins: a long requeue-after never postpones a short retry. Waiting
   keys are not dirty yet, so a plain `add` meanwhile is handed out at once, and the delayed
   add still happens later (merged if the key is dirty by then).
5. Rate-limited adds: `add_rate_limited(key)` is `add_after(key, limiter.when(key))`;
   `forget(key)` clears the key's failure history, `num_requeues(key)` reports it.
6. Shutdown: after `shutdown()`, adds are dropped and waiting delayed adds are discarded;
   `get` still hands out the keys already queued (as client-go does), then raises
   `QueueShutDown` to every caller. `shut_down_with_drain()` does the same and also waits until
   every key in flight has been marked done (optionally up to a timeout).
7. `len(queue)` is the number of queued keys: dirty and not in flight.

Misuse, by contract:

- Call `done(key)` exactly once for every key `get` returned, error or not. A forgotten done
  blocks that key for ever, and makes `shut_down_with_drain` wait until its timeout.
- Call `forget(key)` when the key succeeded or you stop retrying it, else its backoff keeps
  growing. `done` and `forget` are independent: always done, forget only when not retrying.
- `len()` is for information and metrics only. Do not decide whether to add or get on it.

Metrics (controller-runtime's `workqueue_*` series) come from the provider passed as
`metrics=`; see `metrics_workqueue`. Without one, nothing is recorded.

Concurrency: one asyncio event loop, no threads. Every method reads and updates the sets
without awaiting in between, so the invariants hold whenever another task runs and no locks are
needed. Call the queue only from the loop that runs it (`add_after` and `get` need it running).
"""

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from jobset_controller.runtime.clock import Clock, RealClock
from jobset_controller.runtime.metrics_workqueue import (
    NoopWorkQueueMetricsProvider,
    WorkQueueMetricsProvider,
)
from jobset_controller.runtime.ratelimit import RateLimiter, default_controller_rate_limiter

K = TypeVar("K", bound=Hashable)

# How often the in-flight gauges are refreshed while work is in flight (controller-runtime: 500 ms).
UNFINISHED_WORK_UPDATE_PERIOD = 0.5


class QueueShutDown(Exception):
    """Raised by `WorkQueue.get` once the queue is shut down and no queued key is left.

    An exception rather than a sentinel, so `get` returns only keys and a worker ends with
    ``except QueueShutDown: return`` (the convention of Python 3.13's ``asyncio.Queue``).
    """


@dataclass(order=True, frozen=True)
class _Delayed(Generic[K]):
    """A key waiting for its ready time; ordered by time, then by when `add_after` was called."""

    ready_at: float
    sequence: int
    key: K = field(compare=False)


class WorkQueue(Generic[K]):
    """A FIFO of keys with dedup, one worker per key, delayed and rate-limited adds, drain.

    See the module docstring for the guarantees and the misuse contract.
    """

    def __init__(
        self,
        name: str,
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter | None = None,
        metrics: WorkQueueMetricsProvider | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else RealClock()
        self._rate_limiter: RateLimiter = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(clock=self._clock)
        )
        provider = metrics if metrics is not None else NoopWorkQueueMetricsProvider()
        self._metrics = provider.for_queue(name)

        # Keys to hand out, in arrival order. Each is in _dirty and not in _processing, once.
        self._queue: deque[K] = deque()
        # Keys that need processing: all of _queue, plus keys in flight that were added again
        # after their get (done() moves those back into _queue).
        self._dirty: set[K] = set()
        # Keys held by a worker, between get() and done(). Never in _queue at the same time.
        self._processing: set[K] = set()

        # Delayed adds: a min-heap by ready time. An entry is live only while _delayed_by_key
        # maps its key to it; an entry replaced by an earlier one is skipped when it surfaces.
        self._delayed: list[_Delayed[K]] = []
        self._delayed_by_key: dict[K, _Delayed[K]] = {}
        self._sequence = itertools.count()
        # One timer task, sleeping until the earliest live ready time (_timer_at).
        self._timer: asyncio.Task[None] | None = None
        self._timer_at = 0.0

        # Tasks blocked in get(), oldest first; each is woken by resolving its future.
        self._getters: deque[asyncio.Future[None]] = deque()
        # Tasks in shut_down_with_drain(), woken when _processing empties or shutdown() is called.
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._drain_abandoned = False
        self._shutting_down = False
        # Refreshes the in-flight gauges while _processing is non-empty, then ends.
        self._unfinished_work_updater: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Queued keys (dirty, not in flight). For information and metrics only."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """No key queued and none in flight (keys waiting out a delay do not count)."""
        return not self._queue and not self._processing

    @property
    def shutting_down(self) -> bool:
        """True once `shutdown` or `shut_down_with_drain` has been called."""
        return self._shutting_down

    # ------------------------------------------------------------------ adding

    def add(self, key: K) -> None:
        """Mark `key` as needing processing. Merged if already queued; dropped after shutdown."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._metrics.added(key, self._clock.now())
        if key in self._processing:
            return  # done(key) queues it again.
        self._push(key)

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` once `delay` seconds have passed; the earliest pending time wins.

        A delay above zero counts as a retry in the metrics (controller-runtime's rule).
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        self._metrics.retried()
        ready_at = self._clock.now() + delay
        pending = self._delayed_by_key.get(key)
        if pending is not None and pending.ready_at <= ready_at:
            return
        entry = _Delayed(ready_at, next(self._sequence), key)
        self._delayed_by_key[key] = entry
        heapq.heappush(self._delayed, entry)
        self._arm_timer()

    def add_rate_limited(self, key: K) -> None:
        """Add `key` after the rate limiter's delay for it; this records one more failure."""
        self.add_after(key, self._rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Clear `key`'s failure history in the rate limiter (after success or giving up)."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited adds of `key` the limiter has on record."""
        return self._rate_limiter.num_requeues(key)

    # ------------------------------------------------------------------ working

    async def get(self) -> K:
        """Wait for a queued key and hand it to the caller, who must call `done(key)`.

        Raises `QueueShutDown` once the queue is shut down and nothing is queued.

        It always gives the event loop one turn, even with keys queued: a worker whose
        reconciles make no request (a steady JobSet) would otherwise drain a backlog without
        ever yielding, and 50,000 keys queued by an initial list froze the loop (watches,
        probes, lease renewal) for longer than the 10 s renew deadline. The turn is taken with
        the key already held, so a drain never sees "nothing in flight" while a worker is between
        two keys; cancelled during that turn, the key goes back to the front of the queue.
        """
        while not self._queue:
            if self._shutting_down:
                raise QueueShutDown(f"work queue {self.name!r} is shut down")
            await self._wait_for_key()
        key = self._queue.popleft()
        self._dirty.remove(key)
        self._processing.add(key)
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self._processing.discard(key)
            self._dirty.add(key)
            self._queue.appendleft(key)
            self._wake_one_getter()
            if not self._processing:
                self._wake_drain_waiters()
            raise
        self._metrics.taken(key, self._clock.now())
        self._ensure_unfinished_work_updates()
        return key

    def done(self, key: K) -> None:
        """Mark the work on `key` finished; requeue it if it was added meanwhile.

        Raises ValueError if `key` is not in flight (a done without a get, or a second done).
        """
        if key not in self._processing:
            raise ValueError(f"done({key!r}) on work queue {self.name!r} without a matching get")
        self._processing.remove(key)
        self._metrics.finished(key, self._clock.now())
        if key in self._dirty:
            self._push(key)
        if not self._processing:
            self._wake_drain_waiters()

    # ------------------------------------------------------------------ shutting down

    def shutdown(self) -> None:
        """Stop accepting adds; `get` raises `QueueShutDown` once the queued keys are gone.

        Also abandons a `shut_down_with_drain` that is still waiting (it returns False).
        """
        self._begin_shutdown()
        self._drain_abandoned = True
        self._wake_drain_waiters()

    async def shut_down_with_drain(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Shut down, then wait until no key is in flight.

        Returns True once every in-flight key is done; False if `timeout` seconds pass first,
        or if `shutdown()` is called meanwhile. The timeout is a parameter rather than left to
        `asyncio.timeout` because it runs on the queue's clock, which tests drive.
        """
        self._begin_shutdown()
        self._drain_abandoned = False
        loop = asyncio.get_running_loop()
        expiry = None if timeout is None else loop.create_task(self._clock.sleep(timeout))
        try:
            while self._processing and not self._drain_abandoned:
                waiter: asyncio.Future[None] = loop.create_future()
                self._drain_waiters.append(waiter)
                if expiry is None:
                    await waiter
                    continue
                await asyncio.wait((waiter, expiry), return_when=asyncio.FIRST_COMPLETED)
                if expiry.done():
                    break
            return not self._processing
        finally:
            if expiry is not None:
                expiry.cancel()

    # ------------------------------------------------------------------ internals

    def _push(self, key: K) -> None:
        self._queue.append(key)
        self._wake_one_getter()

    def _wake_one_getter(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    async def _wait_for_key(self) -> None:
        getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._getters.append(getter)
        try:
            await getter
        except asyncio.CancelledError:
            if getter in self._getters:
                self._getters.remove(getter)
            elif self._queue:
                # We were woken for a key but are leaving: pass the wake-up on, or it is lost.
                self._wake_one_getter()
            raise

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._delayed.clear()
        self._delayed_by_key.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    def _wake_drain_waiters(self) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    def _arm_timer(self) -> None:
        """Make sure a timer task sleeps until the earliest live ready time.

        client-go's delaying loop also wakes every 10 s as insurance against a missed signal.
        Not needed here: the only way in is `add_after`, which re-arms the timer before returning.
        """
        while self._delayed and not self._is_live(self._delayed[0]):
            heapq.heappop(self._delayed)  # superseded: no need to wake up for it
        if not self._delayed:
            return
        ready_at = self._delayed[0].ready_at
        if self._timer is not None:
            if self._timer_at <= ready_at:
                return
            self._timer.cancel()
        self._timer_at = ready_at
        self._timer = asyncio.get_running_loop().create_task(self._fire_at(ready_at))

    async def _fire_at(self, ready_at: float) -> None:
        await self._clock.sleep(ready_at - self._clock.now())
        self._timer = None
        self._release_ready()
        self._arm_timer()

    def _release_ready(self) -> None:
        now = self._clock.now()
        while self._delayed and self._delayed[0].ready_at <= now:
            entry = heapq.heappop(self._delayed)
            if self._is_live(entry):
                del self._delayed_by_key[entry.key]
                self.add(entry.key)

    def _is_live(self, entry: _Delayed[K]) -> bool:
        """False for an entry replaced by an earlier `add_after` of its key."""
        return self._delayed_by_key.get(entry.key) is entry

    def _ensure_unfinished_work_updates(self) -> None:
        updater = self._unfinished_work_updater
        if updater is None or updater.done():
            self._unfinished_work_updater = asyncio.get_running_loop().create_task(
                self._update_unfinished_work()
            )

    async def _update_unfinished_work(self) -> None:
        while self._processing:
            await self._clock.sleep(UNFINISHED_WORK_UPDATE_PERIOD)
            self._metrics.update_unfinished_work(self._clock.now())
