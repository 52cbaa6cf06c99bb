"""What a process runs, declared once, and started and stopped by group in a fixed order.

controller-runtime's manager holds one list of "runnables" and sorts each into a group by what it
says it is; this module is ours in that shape. A `Runnable` names itself, says which `Group` it
belongs to, and may give:

- `start`: awaited when its group starts, before the next runnable (binding a port, a probe whose
  answer the next one needs). An exception here ends the start (the caller decides the exit);
- `run`: the long-running part, a task from the group's start until the group stops;
- `synced`: what its group waits for before the next group starts (a cache's first list), within
  the start's `limit`;
- `ready`: a readiness check. The checks of every runnable are handed to `on_ready_check` as they
  are added, so /readyz is the conjunction of every part by construction: a part cannot be
  started without being part of readiness;
- `stop`: the graceful part of stopping (drain a queue, flush a buffer), awaited with the time
  left of the group's budget before the `run` task is cancelled.

Groups start in `Group` order: servers (probes and metrics answer first), webhooks, caches
(the next group starts only once they listed), the rest, and the leader group only once the
caller holds leadership. They stop in the reverse order, each group's graceful stops running
together within the budget its caller gives; whatever is still running then is cancelled.

Lifetime: one `Runnables` per process run. It never starts a group twice; `stop_all` stops every
group started, newest first, and is safe to call at any point of a start.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from jobset_controller.runtime.clock import Clock, wait_for

log = structlog.get_logger("runnables")


class Group(enum.IntEnum):
    """Start order (stop order is the reverse)."""

    SERVERS = 0
    WEBHOOKS = 1
    CACHES = 2
    OTHERS = 3
    LEADER = 4


@dataclass(frozen=True)
class Runnable:
    """One part of the process (module docstring)."""

    name: str
    group: Group
    run: Callable[[], Awaitable[Any]] | None = None
    start: Callable[[], Awaitable[Any]] | None = None
    synced: Callable[[], Awaitable[Any]] | None = None
    ready: Callable[[], bool] | None = None
    stop: Callable[[float], Awaitable[Any]] | None = None


class NotSynced(Exception):
    """A group's `synced` waits did not all finish within the start's limit."""


@dataclass
class _Started:
    runnable: Runnable
    task: asyncio.Task[Any] | None


@dataclass
class Runnables:
    """The process's runnables, by group; see the module docstring."""

    clock: Clock
    on_ready_check: Callable[[str, Callable[[], bool]], None] = lambda name, check: None
    _parts: list[Runnable] = field(default_factory=list)
    _started: dict[Group, list[_Started]] = field(default_factory=dict)

    def add(self, runnable: Runnable) -> None:
        """Declare a part; its readiness check joins readiness now. Names are unique."""
        if any(part.name == runnable.name for part in self._parts):
            raise ValueError(f"runnable {runnable.name!r} added twice")
        if runnable.group in self._started:
            raise ValueError(f"group {runnable.group.name} already started")
        self._parts.append(runnable)
        if runnable.ready is not None:
            self.on_ready_check(runnable.name, runnable.ready)

    def of(self, group: Group) -> list[Runnable]:
        return [part for part in self._parts if part.group == group]

    def ready(self) -> bool:
        """Every readiness check passes (the same conjunction /readyz serves)."""
        return all(part.ready() for part in self._parts if part.ready is not None)

    async def start(self, group: Group, *, limit: float | None = None) -> None:
        """Start `group`: each `start` in the order added, each `run` as a task, then wait for
        every `synced` (at most `limit` seconds on the clock; NotSynced after that)."""
        if group in self._started:
            raise ValueError(f"group {group.name} started twice")
        started = self._started[group] = []
        for part in self.of(group):
            if part.start is not None:
                await part.start()
            task = None
            if part.run is not None:
                task = asyncio.create_task(_logged(part), name=part.name)
            started.append(_Started(part, task))
        waits = [part.synced() for part in self.of(group) if part.synced is not None]
        if not waits:
            return
        if limit is None:
            await asyncio.gather(*waits)
            return
        try:
            await wait_for(self.clock, _all(waits), limit)
        except TimeoutError as timeout:
            raise NotSynced(group.name) from timeout

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The `run` tasks of the started groups (to notice one that ended on its own)."""
        return [s.task for group in self._started.values() for s in group if s.task is not None]

    async def stop(self, group: Group, *, budget: float) -> bool:
        """Stop `group` if started: its graceful stops together within `budget` seconds, then
        cancel what still runs (also when this call itself is cancelled). True when every
        graceful stop finished in time."""
        started = self._started.pop(group, None)
        if started is None:
            return True
        graceful = True
        try:
            stops = [s.runnable.stop(budget) for s in started if s.runnable.stop is not None]
            if stops:
                try:
                    await wait_for(self.clock, _all(stops), budget)
                except TimeoutError:
                    graceful = False
                    log.warning("graceful stop did not finish in time", group=group.name)
        finally:
            await _cancel(started)
        return graceful

    async def cancel(self, group: Group) -> None:
        """Cancel `group` if started, with no graceful part (a deposed leader's workers)."""
        started = self._started.pop(group, None)
        if started is not None:
            await _cancel(started)

    async def stop_all(self) -> None:
        """Cancel every started group, newest first, with no graceful part (the end of a run
        that failed, or the last step of one that stopped its groups itself)."""
        for group in sorted(self._started, reverse=True):
            await _cancel(self._started.pop(group))


async def _all(awaitables: list[Awaitable[Any]]) -> None:
    """Await them together, as a coroutine (so cancelling it retrieves what they raise)."""
    await asyncio.gather(*awaitables)


async def _cancel(started: list[_Started]) -> None:
    tasks = [s.task for s in started if s.task is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _logged(part: Runnable) -> Any:
    """`part.run()`; an exception is logged with the part's name before it ends the task."""
    assert part.run is not None
    try:
        return await part.run()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("runnable failed", runnable=part.name)
        raise
