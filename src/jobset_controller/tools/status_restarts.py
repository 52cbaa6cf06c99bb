"""``status``: where the JobSet's restart stands, and how its last restart went.

Why its own section: a restart is the time a training run's accelerators sit idle, and what holds
it up is spread over many objects (the previous attempt's Jobs and their terminating pods, the
new attempt's Jobs, their readiness). This section answers "how far is it, and what is it waiting
for" in the phase words the controller's metrics use (docs/behaviour.md#restart-timeline):

    Restart 2 in progress for 3m (teardown): 1 of 4 old Jobs left; pod js-w-1-0-x Terminating
      on node n-12 for 2m, past its grace period
    Last restart: restart 1 (RestartJobSet after js-w-0 failed (BackoffLimitExceeded)) completed
      in 74.1s: failure seen +0.8s, old Jobs gone +31.2s, ... (2h ago)

The first lines come from the objects as they are now (RestartingJobSet=True, the Jobs' attempt
labels, their pods, the status counts); the last from the newest RestartCompleted Event. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from jobset_controller.api import RESTARTS_KEY, ConditionType
from jobset_controller.reconcile.catalogue import RESTART_COMPLETED_EVENT
from jobset_controller.tools.status_model import (
    JobSetState,
    Obj,
    age,
    condition,
    controller_uid,
    event_time,
    items,
    labels_of,
    name,
    parse_time,
    section,
    uid,
)

# Terminating pods named in the teardown line at most (a restart of thousands of pods).
SHOWN_PODS: Final = 3


def restart_lines(state: JobSetState) -> list[str]:
    """The restart in progress, if any, then the last completed one, if any."""
    lines = _in_progress(state)
    last = _last_completed(state)
    if last:
        lines.append(last)
    return lines


def _in_progress(state: JobSetState) -> list[str]:
    js = state.jobset
    restarting = condition(js, ConditionType.RESTARTING_JOBSET)
    if restarting is None or restarting.get("status") != "True":
        return []
    attempt = _int(section(js, "status").get("restarts"))
    since = age(parse_time(restarting.get("lastTransitionTime")), state.now)
    old = [job for job in state.jobs if _attempt(job) < attempt]
    new = [job for job in state.jobs if _attempt(job) == attempt]
    expected = sum(_int(r.get("replicas", 1)) for r in items(section(js, "spec"), "replicatedJobs"))
    head = f"  Restart {attempt} in progress for {since}"
    if old:
        lines = [f"{head} (teardown): {len(old)} of {len(state.jobs)} Jobs are the old attempt's"]
        lines.extend(_terminating(state, old))
        return lines
    if len(new) < expected:
        return [f"{head} (create): {len(new)} of {expected} new Jobs created"]
    ready = sum(
        _int(entry.get("ready")) + _int(entry.get("succeeded"))
        for entry in items(section(js, "status"), "replicatedJobsStatus")
    )
    return [f"{head} (ready): {ready} of {expected} Jobs ready"]


def _terminating(state: JobSetState, old: Sequence[Obj]) -> list[str]:
    """The old Jobs' pods that are terminating, longest first: what the teardown waits for."""
    uids = {uid(job) for job in old}
    pods = [
        pod
        for pod in state.pods
        if controller_uid(pod) in uids and section(pod, "metadata").get("deletionTimestamp")
    ]
    pods.sort(key=lambda pod: (str(section(pod, "metadata").get("deletionTimestamp")), name(pod)))
    lines = []
    for pod in pods[:SHOWN_PODS]:
        meta = section(pod, "metadata")
        ends = parse_time(meta.get("deletionTimestamp"))
        node = section(pod, "spec").get("nodeName") or "-"
        overdue = ends is not None and ends < state.now
        lines.append(
            f"    pod {name(pod)} Terminating on node {node}"
            + (f", {age(ends, state.now)} past its grace period" if overdue else "")
        )
    if len(pods) > SHOWN_PODS:
        lines.append(f"    ... and {len(pods) - SHOWN_PODS} more pods Terminating")
    return lines


def _last_completed(state: JobSetState) -> str:
    completed = [e for e in state.events if e.get("reason") == RESTART_COMPLETED_EVENT]
    if not completed:
        return ""
    event = completed[-1]
    return f"  Last restart: {event.get('note', '')} ({age(event_time(event), state.now)} ago)"


def _attempt(job: Obj) -> int:
    value = labels_of(job).get(RESTARTS_KEY, "")
    return int(value) if value.isdigit() else -1


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
