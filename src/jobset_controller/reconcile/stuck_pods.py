"""Pods stuck terminating on a dead node, and when to force-delete them.

See docs/behaviour.md#pods-on-unreachable-nodes. A pod is removed from the API only when its
kubelet confirms that its containers are gone; on a node whose kubelet is dead (the node
lifecycle controller has tainted it ``node.kubernetes.io/unreachable`` or ``not-ready``) that
never happens. A Job deleted in the foreground then waits for such a pod forever, and with it
the JobSet's next attempt, whose Jobs take the same names (kubernetes-sigs/jobset#576, #392,
#665); a Job whose pod failure policy counts only terminal pods never even fails.

The decision for one Job's pods (the pod controller's key): a pod is force-deleted when

* it is being deleted (``deletionTimestamp`` set), in any phase;
* it is bound to a node that carries one of ``DEAD_NODE_TAINTS`` (any effect);
* the time is past its ``deletionTimestamp`` (the end of its grace period) by ``after`` seconds,
  or by the pod's own grace period when ``after`` is None: twice the grace period after the
  delete request, so a kubelet that is only slow has had every chance to confirm.

A pod whose time has not come yet gives the Plan a requeue at that time (a node becoming
reachable again wakes the Job through its taints, and the pod then ends normally). The shell
force-deletes as the pod garbage collector does on an out-of-service node: the pod is marked
Failed with a ``DisruptionTarget`` condition first (so the Job controller releases its tracking
finalizer and a pod failure policy can tell it from a real failure), then deleted with grace
period 0 and the pod's UID as precondition, and one Event per pod names it and its node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from jobset_controller.api.placement import node_name
from jobset_controller.api.pod_status import (
    Pod,
    deletion_grace_seconds,
    deletion_timestamp,
    is_terminating,
)
from jobset_controller.reconcile.timestamps import format_time, parse_time

# The taints the node lifecycle controller puts on a node whose kubelet stopped reporting
# (unreachable: its Lease expired, Ready Unknown) or reports it is not ready (Ready False).
DEAD_NODE_TAINTS: Final = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")

# A node's dead-node taint keys, or None when the node is not in the cache (a deleted node's
# pods are the pod garbage collector's: it removes pods bound to a node that no longer exists).
NodeTaints = Callable[[str], Sequence[str] | None]


@dataclass(frozen=True)
class ForceDelete:
    """A pod to mark Failed and delete with grace period 0 (UID precondition)."""

    pod: str
    uid: str
    node: str
    taint: str
    terminating_since: str
    terminal: bool


@dataclass(frozen=True)
class StuckPods:
    """The force deletes of one pass, and when to look again (None: no pod is waiting)."""

    deletes: tuple[ForceDelete, ...] = ()
    requeue_after: float | None = None


def plan_stuck_pods(
    pods: Sequence[Pod], node_taints: NodeTaints, now: datetime, *, after: float | None
) -> StuckPods:
    """The pods of ``pods`` to force-delete now (module docstring); ``after`` is the
    Configuration's ``unreachableNodePods.forceDeleteAfter`` (None: each pod's grace period)."""
    deletes: list[ForceDelete] = []
    waits: list[float] = []
    for pod in pods:
        if not is_terminating(pod):
            continue
        node = node_name(pod)
        taints = node_taints(node) if node else None
        if not taints:
            continue
        ends = parse_time(deletion_timestamp(pod))
        if ends is None:
            continue
        grace = deletion_grace_seconds(pod)
        due = ends + timedelta(seconds=grace if after is None else after)
        if now < due:
            waits.append((due - now).total_seconds())
            continue
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        deletes.append(
            ForceDelete(
                pod=str(meta.get("name") or ""),
                uid=str(meta.get("uid") or ""),
                node=node,
                taint=taints[0],
                terminating_since=format_time(ends - timedelta(seconds=grace)),
                terminal=phase in ("Failed", "Succeeded"),
            )
        )
    return StuckPods(tuple(deletes), min(waits) if waits else None)


def dead_node_taints(taints: Sequence[object]) -> tuple[str, ...]:
    """The keys among a Node's ``spec.taints`` that mark it dead (``DEAD_NODE_TAINTS`` order)."""
    keys = {str(t.get("key")) for t in taints if isinstance(t, dict)}
    return tuple(key for key in DEAD_NODE_TAINTS if key in keys)
