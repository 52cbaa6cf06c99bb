"""How a JobSet pod's end is read: the container that failed it, and whether it is terminating.

See docs/behaviour.md#restart-timeline and #pods-on-unreachable-nodes. Two decisions read a pod's
end: the first failure a restart or a failure names (``reconcile.first_failure``: which pod, on
which node, which container exited with which code) and the pods stuck terminating on an
unreachable node (``reconcile.stuck_pods``). The pod cache keeps only the pods those decisions
need (failed or terminating ones) and only these facts of each (``end_facts``), so the reading
and the trimming are defined together, here, where both the controller and reconcile can import
them. Everything is pure and reads raw pod dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api.constants import JOBSET_NAME_KEY, JOBSET_UID_KEY

Pod = Mapping[str, Any]

# A pod's own status message can be long (an eviction lists every resource); a restart's message
# quotes at most this much of it.
MAX_POD_MESSAGE: Final = 256
_CONTAINER_LISTS: Final = ("initContainerStatuses", "containerStatuses")


@dataclass(frozen=True)
class ContainerEnd:
    """A container that terminated with a non-zero exit code."""

    name: str
    exit_code: int
    reason: str
    finished_at: str


def _meta(pod: Pod) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _status(pod: Pod) -> Mapping[str, Any]:
    return pod.get("status") or {}


def is_terminating(pod: Pod) -> bool:
    """The pod has been asked to go (``deletionTimestamp`` set)."""
    return bool(_meta(pod).get("deletionTimestamp"))


def is_failed(pod: Pod) -> bool:
    """The pod's phase is Failed."""
    return _status(pod).get("phase") == "Failed"


def deletion_timestamp(pod: Pod) -> str:
    """When the pod's grace period ends (RFC 3339), or ''."""
    return str(_meta(pod).get("deletionTimestamp") or "")


def deletion_grace_seconds(pod: Pod) -> int:
    """The grace period of the pod's deletion (0 when unset)."""
    value = _meta(pod).get("deletionGracePeriodSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def controller_uid(pod: Pod) -> str:
    """The UID of the pod's controller (its Job), or ''."""
    for ref in _meta(pod).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


def failing_container(pod: Pod) -> ContainerEnd | None:
    """The container (init containers included) that ended first with a non-zero exit code."""
    ends = []
    for key in _CONTAINER_LISTS:
        for status in _status(pod).get(key) or ():
            terminated = ((status or {}).get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            if isinstance(code, int) and not isinstance(code, bool) and code != 0:
                ends.append(
                    ContainerEnd(
                        str(status.get("name") or ""),
                        code,
                        str(terminated.get("reason") or ""),
                        str(terminated.get("finishedAt") or ""),
                    )
                )
    return min(ends, key=lambda end: (end.finished_at or "~", end.name), default=None)


def end_facts(pod: Pod) -> dict[str, Any]:
    """What the pod cache keeps of a failed or terminating JobSet pod: the facts above and the
    pod's identity (name, uid, the JobSet's name and uid labels, its controller's uid)."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    kept_meta: dict[str, Any] = {
        key: meta[key]
        for key in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        )
        if key in meta
    }
    kept_meta["labels"] = {k: labels[k] for k in (JOBSET_NAME_KEY, JOBSET_UID_KEY) if k in labels}
    uid = controller_uid(pod)
    if uid:
        kept_meta["ownerReferences"] = [{"uid": uid, "controller": True}]
    status = _status(pod)
    kept_status: dict[str, Any] = {k: status[k] for k in ("phase", "reason") if k in status}
    if status.get("message"):
        kept_status["message"] = str(status["message"])[:MAX_POD_MESSAGE]
    container = failing_container(pod)
    if container is not None:
        kept_status["containerStatuses"] = [
            {
                "name": container.name,
                "state": {
                    "terminated": {
                        "exitCode": container.exit_code,
                        "reason": container.reason,
                        "finishedAt": container.finished_at,
                    }
                },
            }
        ]
    node = (pod.get("spec") or {}).get("nodeName")
    return {
        "metadata": kept_meta,
        "spec": {"nodeName": node} if node else {},
        "status": kept_status,
    }


def merge_end_facts(trimmed: Mapping[str, Any], pod: Pod) -> dict[str, Any]:
    """``trimmed`` (another cache's trim of ``pod``) with ``end_facts`` added where it has none
    of its own: placement's fields win, so both readers find what they read."""
    facts = end_facts(pod)
    out: dict[str, Any] = {section: dict(trimmed.get(section) or {}) for section in facts}
    for section, values in facts.items():
        for key, value in values.items():
            if key == "labels":
                out[section]["labels"] = {**value, **(out[section].get("labels") or {})}
            else:
                out[section].setdefault(key, value)
    for section, values in trimmed.items():
        out.setdefault(section, values)
    return out


def ends(pods: Sequence[Pod]) -> list[Pod]:
    """The pods among ``pods`` the end readers care about: failed or terminating."""
    return [pod for pod in pods if is_failed(pod) or is_terminating(pod)]
