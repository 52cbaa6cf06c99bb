"""``status`` output: JobSet -> replicatedJobs -> Jobs -> pods, conditions, events, diagnosis.

Why a tree: the questions users ask ("which Job is stuck, and which of its pods?") follow the
ownership chain, and kubectl shows each level in a separate command. Jobs are placed under their
replicatedJob by the ``replicatedjob-name`` label, pods under their Job by the controller owner
reference. Pure: ``render`` is a function of the ``JobSetState``.
"""

from __future__ import annotations

from typing import Final

from jobset_controller.api import (
    JOB_INDEX_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
    ConditionType,
)
from jobset_controller.reconcile.classify import JOB_COMPLETE, JOB_FAILED, JOB_SUSPENDED
from jobset_controller.tools.diagnosis import diagnose
from jobset_controller.tools.plan_render import pod_group_lines
from jobset_controller.tools.status_model import (
    JobSetState,
    Obj,
    age,
    condition,
    controller_uid,
    count,
    event_time,
    is_true,
    items,
    labels_of,
    name,
    parse_time,
    section,
    uid,
)
from jobset_controller.tools.status_restarts import restart_lines

LAST_EVENTS: Final = 8


def render(state: JobSetState, *, last_events: int = LAST_EVENTS) -> str:
    """The whole report of one JobSet."""
    js = state.jobset
    metadata = section(js, "metadata")
    status = section(js, "status")
    created = parse_time(metadata.get("creationTimestamp"))
    lines = [
        f"JobSet {metadata.get('namespace')}/{name(js)}  {phase(js)}"
        f"  restarts {status.get('restarts', 0)}"
        f" (counting towards max {status.get('restartsCountTowardsMax', 0)})"
        f"  age {age(created, state.now)}"
    ]
    found = diagnose(state)
    if found:
        lines.append(f"  Diagnosis: {found}")
    conditions = items(status, "conditions")
    if conditions:
        lines.append("  Conditions:")
        for entry in conditions:
            since = age(parse_time(entry.get("lastTransitionTime")), state.now)
            lines.append(
                f"    {entry.get('type')}={entry.get('status')}  {entry.get('reason', '')}: "
                f"{entry.get('message', '')}  ({since})"
            )
    lines.extend(restart_lines(state))
    lines.extend(_pod_groups(state))
    lines.extend(_replicated_jobs(state))
    lines.extend(_events(state, last_events))
    return "\n".join(lines) + "\n"


def _pod_groups(state: JobSetState) -> list[str]:
    """Gang scheduling (KEP-969): the PodGroups and their conditions."""
    if not state.scheduling_api:
        return ["  PodGroups: none (the API server does not serve scheduling.k8s.io/v1beta1)"]
    if not state.pod_groups:
        return []
    lines = ["  PodGroups:"]
    for group, line in zip(state.pod_groups, pod_group_lines(state.pod_groups), strict=True):
        conditions = " ".join(
            f"{entry.get('type')}={entry.get('status')}"
            for entry in items(section(group, "status"), "conditions")
        )
        lines.append(f"    {line}" + (f"  {conditions}" if conditions else ""))
    return lines


def phase(js: Obj) -> str:
    """One word for the JobSet: Completed, Failed, Suspended, Restarting or Running."""
    terminal = section(js, "status").get("terminalState")
    if terminal:
        return str(terminal)
    for kind in (ConditionType.COMPLETED, ConditionType.FAILED):
        if is_true(js, kind):
            return kind
    if section(js, "spec").get("suspend") is True:
        return "Suspended"
    if is_true(js, ConditionType.RESTARTING_JOBSET):
        return "Restarting"
    return "Running"


def job_phase(job: Obj) -> str:
    """Complete, Failed, Suspended, Running (a pod active) or Pending."""
    for kind in (JOB_COMPLETE, JOB_FAILED, JOB_SUSPENDED):
        if is_true(job, kind):
            return kind
    if section(job, "spec").get("suspend") is True:
        return "Suspended"
    return "Running" if count(job, "active") else "Pending"


def _replicated_jobs(state: JobSetState) -> list[str]:
    spec = section(state.jobset, "spec")
    counts = {
        str(entry.get("name")): entry
        for entry in items(section(state.jobset, "status"), "replicatedJobsStatus")
    }
    lines: list[str] = []
    for rjob in items(spec, "replicatedJobs"):
        rjob_name = str(rjob.get("name"))
        entry = counts.get(rjob_name, {})
        tallies = "  ".join(
            f"{key} {entry.get(key, 0)}"
            for key in ("ready", "succeeded", "failed", "active", "suspended")
        )
        lines.append(f"  replicatedJob {rjob_name}  replicas {rjob.get('replicas', 1)}: {tallies}")
        jobs = [j for j in state.jobs if labels_of(j).get(REPLICATED_JOB_NAME_KEY) == rjob_name]
        if not jobs and _deferred(state.jobset, entry):
            lines.append("    (no Jobs yet: created at the first resume, deferredChildren)")
        elif not jobs:
            lines.append("    (no Jobs)")
        for job in sorted(jobs, key=_job_order):
            lines.extend(_job(state, job))
    return lines


def _deferred(js: Obj, entry: Obj) -> bool:
    """Suspended Jobs counted in the status but none in the cluster: a JobSet whose Jobs the
    controller defers until its first resume (Configuration ``deferredChildren``)."""
    return section(js, "spec").get("suspend") is True and bool(entry.get("suspended"))


def _job_order(job: Obj) -> tuple[int, str]:
    index = labels_of(job).get(JOB_INDEX_KEY, "")
    return (int(index) if index.isdigit() else 0, name(job))


def _job(state: JobSetState, job: Obj) -> list[str]:
    attempt = labels_of(job).get(RESTARTS_KEY, "?")
    per_job = labels_of(job).get(JOB_RESTART_ATTEMPT_KEY)
    attempts = f"attempt {attempt}" + (f" (job attempt {per_job})" if per_job else "")
    tallies = "  ".join(
        f"{key} {count(job, key)}" for key in ("active", "ready", "succeeded", "failed")
    )
    lines = [f"    Job {name(job)}  {job_phase(job)}  {attempts}  {tallies}"]
    if is_true(job, JOB_FAILED):
        failed = condition(job, JOB_FAILED) or {}
        lines.append(f"      Failed: {failed.get('reason', '')}: {failed.get('message', '')}")
    job_uid = uid(job)
    pods = sorted((p for p in state.pods if controller_uid(p) == job_uid), key=name)
    for pod in pods:
        lines.append(f"      {_pod(pod)}")
    return lines


def _pod(pod: Obj) -> str:
    status = section(pod, "status")
    containers = items(status, "containerStatuses")
    ready = sum(1 for c in containers if c.get("ready") is True)
    restarts = sum(int(c.get("restartCount", 0) or 0) for c in containers)
    wanted = len(items(section(pod, "spec"), "containers"))
    node = section(pod, "spec").get("nodeName") or "-"
    text = (
        f"Pod {name(pod)}  {status.get('phase', 'Pending')}  ready {ready}/{wanted}"
        f"  restarts {restarts}  node {node}"
    )
    for entry in items(status, "conditions"):
        if entry.get("type") == "PodScheduled" and entry.get("status") == "False":
            text += f"  {entry.get('reason', '')}: {entry.get('message', '')}"
    return text


def _events(state: JobSetState, last: int) -> list[str]:
    if not state.events or last <= 0:
        return []
    shown = state.events[-last:]
    lines = [f"  Events (last {len(shown)} of {len(state.events)}):"]
    for event in shown:
        regarding = section(event, "regarding")
        lines.append(
            f"    {age(event_time(event), state.now):>4}  {event.get('type', '')}  "
            f"{event.get('reason', '')}  {regarding.get('kind', '')}/{regarding.get('name', '')}: "
            f"{event.get('note', '')}"
        )
    return lines
