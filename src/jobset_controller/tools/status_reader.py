"""The I/O half of ``status``: read a JobSet, its Jobs, pods and events with our ``KubeClient``.

Thin on purpose: four list/get calls and the grouping by owner; everything shown or concluded
from them is decided by the pure modules (``status_tree``, ``diagnosis``). Jobs and pods are
listed by the ``jobset-name`` label and then kept only when their controller owner is the JobSet
(or one of its Jobs), as the controller itself counts them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

from jobset_controller.api import JOBSET_NAME_KEY
from jobset_controller.controller.resources import JOBS, JOBSETS, POD_GROUPS
from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller.runtime.resources import EVENTS, Resource
from jobset_controller.tools.status_model import JobSetState, controller_uid, event_time, uid

# Pods are read only by this tool; the controller never touches them.
PODS: Final = Resource("", "v1", "pods")
_OLDEST: Final = datetime.min.replace(tzinfo=UTC)


async def read_states(
    client: KubeClient,
    namespace: str,
    name: str | None,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[JobSetState]:
    """Every JobSet of ``namespace`` (or the one named) with its children; NotFound propagates."""
    # Path segments escaped as kubectl does: a name or namespace from the command line may hold
    # any text ("/", "?", a space, a line break), and must stay one segment of one request line.
    namespace = quote(namespace, safe="")
    if name:
        jobsets = [await client.get(JOBSETS.path(namespace, quote(name, safe="")))]
    else:
        jobsets = _items(await client.get(JOBSETS.path(namespace)))
    selector = f"{JOBSET_NAME_KEY}={name}" if name else JOBSET_NAME_KEY
    jobs = _items(await client.get(JOBS.path(namespace), labelSelector=selector))
    pods = _items(await client.get(PODS.path(namespace), labelSelector=selector))
    try:
        events = _items(await client.get(EVENTS.path(namespace)))
    except ApiError:
        events = []  # events are a help, not a requirement (a user may not be allowed to list)
    taken = now()
    states = [group(jobset, jobs, pods, events, taken) for jobset in jobsets]
    if any((state.jobset.get("spec") or {}).get("scheduling") for state in states):
        states = await _with_pod_groups(client, namespace, states)
    return states


async def _with_pod_groups(
    client: KubeClient, namespace: str, states: list[JobSetState]
) -> list[JobSetState]:
    """Gang scheduling: each JobSet's PodGroups (controller-owned), or a note that the API
    server does not serve them."""
    try:
        listing = _items(await client.get(POD_GROUPS.path(namespace)))
    except ApiError:
        return [
            dataclasses.replace(state, scheduling_api=False)
            if (state.jobset.get("spec") or {}).get("scheduling")
            else state
            for state in states
        ]
    return [
        dataclasses.replace(
            state,
            pod_groups=tuple(g for g in listing if controller_uid(g) == uid(state.jobset)),
        )
        for state in states
    ]


def group(
    jobset: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    now: datetime,
) -> JobSetState:
    """The children of one JobSet by controller owner, and the events about any of them."""
    own_jobs = tuple(job for job in jobs if controller_uid(job) == uid(jobset))
    job_uids = {uid(job) for job in own_jobs}
    own_pods = tuple(pod for pod in pods if controller_uid(pod) in job_uids)
    subjects = {uid(jobset), *job_uids, *(uid(pod) for pod in own_pods)}
    about = [e for e in events if (e.get("regarding") or {}).get("uid") in subjects]
    about.sort(key=lambda event: event_time(event) or _OLDEST)
    return JobSetState(jobset, own_jobs, own_pods, tuple(about), now)


def _items(listing: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [item for item in listing.get("items") or () if isinstance(item, dict)]
