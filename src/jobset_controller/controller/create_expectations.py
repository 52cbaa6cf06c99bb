"""Jobs a pass created that the Job cache has not shown yet, per JobSet (client-go's
ControllerExpectations, for creates).

Why: every Job a pass creates comes back as a watch event that enqueues its JobSet again, and the
events of one pass's creates arrive over the whole time the creates take. A pass that starts
before the cache holds every Job the previous pass created reads a cache that is behind our own
writes: it rebuilds creates that end in AlreadyExists, or counts from part of the children (a
status write that the next pass undoes), and it pays for reading every cached child (one JobSet
of 1000 Jobs sent 1000-1080 creates, the extra ones answered AlreadyExists; cpu_bench.py). So the
controller skips a pass while its last creates are unseen: the event of the last one enqueues
the key again.

Guarantees (one test each, tests/unit/controller/test_create_expectations.py):

1. `expect(key, names)` is called before the creates are sent, so no event can come first.
2. A name stops being awaited when any event of that Job is observed (`observed`: an add, an
   update or a delete; a Job deleted right after its add was still seen), when the cache holds
   it (`pending` checks `in_cache`, at a call with no event observed since the previous one:
   while events arrive they do the work, and a pass of n creates costs O(n) lookups), or when
   the pass did not create it after all (the controller calls `observed` for a create that met
   AlreadyExists, failed or was never sent: such a Job may be one the Job cache never holds,
   e.g. one without our label).
3. `pending(key)` is False once every name is seen; the record is then dropped.
4. No stall: `timeout` seconds after `expect`, a key still awaiting a Job (an event missed while
   the watch relisted, say) is dropped and enqueued once, so its pass runs with what the cache
   holds. A record satisfied or forgotten earlier adds no pass at its deadline.
5. `forget(key)` drops the record (the JobSet is gone, or its creates failed and the retry must
   not wait for Jobs that may never exist); so does `pending` for a JobSet of the same name with
   another UID (deleted and created again between two passes).
6. `close()` (at shutdown) stops the timer: no key is enqueued after it, no task is left.

Cost: one set of names per JobSet with creates in flight, and one timer task for all of them
(every record gets the same timeout, so deadlines come in the order they were set: a queue, no
heap), not a task per JobSet: 10,000 JobSets created at once would otherwise start and cancel
10,000 tasks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from jobset_controller.runtime.clock import Clock, RealClock

log = structlog.get_logger("expectations")

# Long enough for a pass's 1000 creates on a slow API server (>= 1 s at the stock client limit);
# short enough that a missed event costs a JobSet at most a minute (a pass that then runs on a
# lagging cache is harmless: AlreadyExists).
EXPECTATION_TIMEOUT = 60.0


@dataclass(eq=False)
class _Awaited:
    uid: str
    names: set[str]
    deadline: float
    # How many names were awaited at the last `pending` call (None before the first).
    last_size: int | None = None


class CreateExpectations:
    """Per JobSet key, the names of the Jobs its last pass created and the cache has not shown.

    `in_cache(namespace, name)` answers whether the Job cache holds a Job (without parsing it).
    `enqueue` is the work queue's add (used only at a deadline). Call everything from the event
    loop (no locks: nothing here awaits between reading and updating a record).
    """

    def __init__(
        self,
        in_cache: Callable[[str, str], bool],
        enqueue: Callable[[str], None],
        *,
        clock: Clock | None = None,
        timeout: float = EXPECTATION_TIMEOUT,
    ) -> None:
        self._in_cache = in_cache
        self._enqueue = enqueue
        self._clock: Clock = clock or RealClock()
        self._timeout = timeout
        self._awaited: dict[str, _Awaited] = {}
        # (key, record) in deadline order; a record no longer in `_awaited` is skipped.
        self._deadlines: deque[tuple[str, _Awaited]] = deque()
        self._timer: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """JobSets with unseen creates (a gauge, and for tests)."""
        return len(self._awaited)

    def expect(self, key: str, uid: str, names: Iterable[str]) -> None:
        """Before creating: the next pass of the JobSet `key` with `uid` waits until these Jobs
        are seen."""
        self.forget(key)
        awaited = _Awaited(uid, set(names), self._clock.now() + self._timeout)
        if not awaited.names:
            return
        self._awaited[key] = awaited
        self._deadlines.append((key, awaited))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(
                self._expire_due(), name="create expectations"
            )

    def observed(self, key: str, name: str) -> None:
        """An event of Job `name` owned by the JobSet `key` reached the cache."""
        awaited = self._awaited.get(key)
        if awaited is not None:
            awaited.names.discard(name)
            if not awaited.names:
                del self._awaited[key]

    def pending(self, key: str, uid: str) -> bool:
        """Some Job the last pass of this JobSet created is not seen yet (the pass should wait).
        A record of an earlier JobSet of the same name (another `uid`) is dropped."""
        awaited = self._awaited.get(key)
        if awaited is None:
            return False
        if awaited.uid != uid:
            self.forget(key)
            return False
        if awaited.last_size is not None and len(awaited.names) < awaited.last_size:
            # Events took names since the last call: the creates are arriving, and each of them
            # enqueues the key again. Scanning the cache for every name at every such call would
            # cost n^2/2 lookups over a pass of n creates; scan once the events stop instead.
            awaited.last_size = len(awaited.names)
            return True
        namespace = key.partition("/")[0]
        awaited.names = {name for name in awaited.names if not self._in_cache(namespace, name)}
        awaited.last_size = len(awaited.names)
        if awaited.names:
            return True
        self.forget(key)
        return False

    def forget(self, key: str) -> None:
        self._awaited.pop(key, None)

    async def close(self) -> None:
        """Stop the timer and drop every record: the manager's shutdown, once no worker runs.
        Nothing is enqueued afterwards, and no task outlives the controller."""
        timer = self._timer
        self._awaited.clear()
        self._deadlines.clear()
        if timer is not None:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
        self._timer = None  # a timer cancelled before its first step never ran its `finally`

    async def _expire_due(self) -> None:
        """Enqueue each key whose record is still awaited at its deadline; runs while any
        deadline is ahead."""
        try:
            while self._deadlines:
                key, awaited = self._deadlines[0]
                if self._awaited.get(key) is not awaited:  # satisfied or forgotten
                    self._deadlines.popleft()
                    continue
                wait = awaited.deadline - self._clock.now()
                if wait > 0:
                    await self._clock.sleep(wait)
                    continue
                self._deadlines.popleft()
                del self._awaited[key]
                try:
                    log.info(
                        "created Jobs not seen in the cache in time; reconciling without them",
                        jobset=key,
                        unseen=sorted(awaited.names)[:5],
                        timeout_s=self._timeout,
                    )
                    self._enqueue(key)
                except Exception as error:  # the timer must outlive one bad key
                    log.error("releasing a JobSet's create expectations failed", error=str(error))
        finally:
            self._timer = None
