"""The one-line answer to "why is my JobSet not running?", when the objects make it obvious.

Why first match wins, in this order: a user reading ``status`` wants the cause that blocks
progress, not every symptom. A finished JobSet says how it ended; a refused create blocks
everything after it; a suspension blocks pods; an unschedulable pod blocks its Job; a waiting
dependency or startup order blocks later replicatedJobs. No match means nothing obvious: the
tree itself is the answer. Pure; each rule reads only the ``JobSetState``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from jobset_controller.api import EXCLUSIVE_KEY, REPLICATED_JOB_NAME_KEY, ConditionType
from jobset_controller.api.placement import PLACEMENT_GATE
from jobset_controller.reconcile.catalogue import (
    HEADLESS_SERVICE_CREATION_FAILED_EVENT,
    JOB_CREATION_FAILED_EVENT,
    PVC_CREATION_FAILED_EVENT,
)
from jobset_controller.tools.status_model import (
    JobSetState,
    Obj,
    annotations_of,
    condition,
    controller_uid,
    is_true,
    items,
    labels_of,
    name,
    section,
    uid,
)

KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
CREATE_FAILURES: Final = (
    JOB_CREATION_FAILED_EVENT,
    HEADLESS_SERVICE_CREATION_FAILED_EVENT,
    PVC_CREATION_FAILED_EVENT,
)


def diagnose(state: JobSetState) -> str | None:
    """The first rule that matches (see the module docstring), or None."""
    for rule in RULES:
        found = rule(state)
        if found:
            return found
    return None


def finished(state: JobSetState) -> str | None:
    for kind in (ConditionType.FAILED, ConditionType.COMPLETED):
        if is_true(state.jobset, kind):
            found = condition(state.jobset, kind) or {}
            return f"{kind.lower()}: {found.get('reason', '')}: {found.get('message', '')}"
    return None


def being_deleted(state: JobSetState) -> str | None:
    if section(state.jobset, "metadata").get("deletionTimestamp"):
        return "being deleted: garbage collection removes its Jobs and pods first"
    return None


def create_failed(state: JobSetState) -> str | None:
    """The latest create the API server refused, while Jobs are still missing.

    A refused Service or claim stops the pass before its Jobs, so Jobs are missing then too.
    """
    failures = _failures(state)
    if not failures or len(state.jobs) >= _expected_jobs(state):
        return None
    latest = failures[-1]
    return f"{latest.get('reason')}: {latest.get('note', '')}"


def suspended(state: JobSetState) -> str | None:
    if section(state.jobset, "spec").get("suspend") is not True:
        return None
    queue = labels_of(state.jobset).get(KUEUE_QUEUE_LABEL) or annotations_of(state.jobset).get(
        KUEUE_QUEUE_LABEL
    )
    if queue:
        return f"suspended by Kueue: waiting for admission in queue {queue}"
    return "suspended (spec.suspend is true): resume it to start its pods"


def exclusive_placement(state: JobSetState) -> str | None:
    """An exclusive Job waiting for its leader pod to claim a topology domain.

    Either its followers are held behind the placement scheduling gate (the pod webhooks admit
    them gated until the leader is bound), or none of its pods is placed yet.
    """
    for job in state.jobs:
        topology = annotations_of(job).get(EXCLUSIVE_KEY)
        pods = _pods_of(state, job)
        if not topology or not pods or section(job, "spec").get("suspend") is True:
            continue
        gated = [pod for pod in pods if _gated(pod)]
        placed = any(section(p, "spec").get("nodeName") for p in pods)
        if not gated and placed:
            continue
        message = next((m for m in map(_unschedulable, pods) if m), "")
        suffix = f": {message}" if message else ""
        held = f" ({len(gated)} follower pods gated)" if gated else ""
        return (
            f"exclusive placement per {topology}: Job {name(job)} waits for its leader pod "
            f"to be placed in a free domain{held}{suffix}"
        )
    return None


def unschedulable(state: JobSetState) -> str | None:
    pending = [(p, m) for p in state.pods if (m := _unschedulable(p))]
    if not pending:
        return None
    pod, message = pending[0]
    others = f" (and {len(pending) - 1} more)" if len(pending) > 1 else ""
    return f"pod {name(pod)}{others} cannot be scheduled: {message}"


def waiting_on_dependencies(state: JobSetState) -> str | None:
    spec = section(state.jobset, "spec")
    counts = {
        str(entry.get("name")): entry
        for entry in items(section(state.jobset, "status"), "replicatedJobsStatus")
    }
    replicas = {str(r.get("name")): _replicas(r) for r in items(spec, "replicatedJobs")}
    have: dict[str, int] = {}
    for job in state.jobs:
        owner = labels_of(job).get(REPLICATED_JOB_NAME_KEY, "")
        have[owner] = have.get(owner, 0) + 1
    for rjob in items(spec, "replicatedJobs"):
        rjob_name = str(rjob.get("name"))
        if have.get(rjob_name, 0) >= replicas[rjob_name]:
            continue
        for dependency in items(rjob, "dependsOn"):
            target = str(dependency.get("name"))
            wanted = str(dependency.get("status", "Ready"))
            entry = counts.get(target, {})
            done = int(entry.get("succeeded", 0) or 0)
            if wanted != "Complete":
                done += int(entry.get("ready", 0) or 0) + int(entry.get("failed", 0) or 0)
            if done < replicas.get(target, 0):
                word = "succeeded" if wanted == "Complete" else "ready"
                return (
                    f"replicatedJob {rjob_name} waits on dependsOn: {target} to be {wanted} "
                    f"({done}/{replicas.get(target, 0)} {word})"
                )
    return None


def in_order_startup(state: JobSetState) -> str | None:
    if not is_true(state.jobset, ConditionType.STARTUP_POLICY_IN_PROGRESS):
        return None
    return "InOrder startup in progress: later replicatedJobs wait until this one's Jobs are ready"


def restarting(state: JobSetState) -> str | None:
    if not is_true(state.jobset, ConditionType.RESTARTING_JOBSET):
        return None
    found = condition(state.jobset, ConditionType.RESTARTING_JOBSET) or {}
    return f"restarting: {found.get('message', '')}"


RULES: Final[tuple[Callable[[JobSetState], str | None], ...]] = (
    finished,
    being_deleted,
    create_failed,
    suspended,
    exclusive_placement,
    unschedulable,
    waiting_on_dependencies,
    in_order_startup,
    restarting,
)


def _failures(state: JobSetState) -> list[Obj]:
    jobset_uid = uid(state.jobset)
    return [
        event
        for event in state.events
        if event.get("reason") in CREATE_FAILURES
        and section(event, "regarding").get("uid") == jobset_uid
    ]


def _expected_jobs(state: JobSetState) -> int:
    return sum(_replicas(r) for r in items(section(state.jobset, "spec"), "replicatedJobs"))


def _replicas(rjob: Mapping[str, object]) -> int:
    value = rjob.get("replicas", 1)
    return value if isinstance(value, int) else 1


def _pods_of(state: JobSetState, job: Obj) -> list[Obj]:
    job_uid = uid(job)
    return [pod for pod in state.pods if controller_uid(pod) == job_uid]


def _gated(pod: Obj) -> bool:
    return any(
        gate.get("name") == PLACEMENT_GATE
        for gate in items(section(pod, "spec"), "schedulingGates")
    )


def _unschedulable(pod: Obj) -> str:
    """The scheduler's message on a pending pod it could not place, else ""."""
    if section(pod, "status").get("phase") not in (None, "Pending"):
        return ""
    found = condition(pod, "PodScheduled")
    if found and found.get("status") == "False" and found.get("reason") == "Unschedulable":
        return str(found.get("message") or "Unschedulable")
    return ""
