"""Stopping: the order, the budgets, and what a lost Lease does to them.

Belongs here: the graceful stop after SIGTERM/SIGINT. The groups stop in the reverse of their
start order, and the Lease is released between the leader group and the rest. Before step 1
(`Manager._stop`), on every replica, the pod webhooks stop admitting followers behind our gate
(the successor may be upstream's controller, which never releases one), and after the pod
controller's workers stop, the leader logs the followers still gated (docs/operations.md#rollback):

1. LEADER, within `shutdown_timeout` (20 s): every controller's queue stops taking keys and its
   in-flight reconciles finish (all units drain together), then every worker is cancelled, and
   what a controller keeps after its workers is closed (the JobSet controller's create
   expectations). No worker may write once the Lease is released, so this comes first.
2. The Lease is released (a successor takes over in about a second).
3. OTHERS, within `event_flush_timeout` (5 s): every controller's buffered Events are written.
4. CACHES, WEBHOOKS, SERVERS: cancelled (servers close their ports), then the clients close.

20 + 5 s fit in Kubernetes' default 30 s termination grace period. The Lease is still watched
while draining: a leader deposed then exits 1 at once, without releasing (there is no fencing;
it must not write). Steps 4 also run, without 1-3's graceful parts, however else the run ends.

A leader deposed, while working or while draining (`stop_deposed`): its LEADER group is
cancelled at once (no reconcile may write after the Lease is gone), then the Events it has
recorded are written within `deposed_event_flush_timeout` (45 s), and it exits 1. Why write
them: an Event is recorded after the write it reports (a status with a new condition, a
restart); the transition happened, and no successor reports it again, since it sees the state
already written. A Lease is most often lost because the API server is away (a restart took
25-37 s under load in the soak), so the recorder's own retries, about 45 s, are what it takes;
exiting at once dropped those Events (the soak's smoke found a JobSet without its terminal
Event). Events are reports, not state: a deposed leader writing them late races no successor.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from jobset_controller.runtime.leaderelection import LeaderElector, LeadershipLost
from jobset_controller.runtime.runnables import Group, Runnables

log = structlog.get_logger("manager")


class Deposed(Exception):
    """The Lease was lost while draining: exit 1 at once."""


async def stop_gracefully(
    runnables: Runnables,
    *,
    renew: asyncio.Task[None] | None,
    elector: LeaderElector | None,
    shutdown_timeout: float,
    event_flush_timeout: float,
) -> None:
    """Steps 1-3 of the module docstring; raises Deposed if the Lease is lost during step 1."""
    log.info("shutting down: finishing in-flight reconciles")
    draining = asyncio.create_task(runnables.stop(Group.LEADER, budget=shutdown_timeout))
    watched: set[asyncio.Future[Any]] = {draining}
    if renew is not None:
        watched.add(renew)
    done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    if renew is not None and renew in done:
        draining.cancel()
        await asyncio.gather(draining, return_exceptions=True)
        # Read the renewal's exception: one never retrieved is logged again, with a traceback,
        # whenever the task is collected.
        log.error("leader election lost while shutting down, exiting", error=str(renew.exception()))
        raise Deposed
    if not draining.result():
        log.warning("in-flight reconciles did not finish in time; cancelling them")
    if renew is not None:
        renew.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
            await renew
    if elector is not None:
        await elector.release()
    await runnables.stop(Group.OTHERS, budget=event_flush_timeout)


async def stop_deposed(runnables: Runnables, *, event_flush_timeout: float) -> None:
    """A deposed leader's stop (module docstring): the LEADER group cancelled at once, then
    the recorded Events written within `event_flush_timeout` seconds."""
    await runnables.cancel(Group.LEADER)
    await runnables.stop(Group.OTHERS, budget=event_flush_timeout)
