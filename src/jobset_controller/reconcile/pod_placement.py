"""The pod controller's decision for one Job's pods: release waiting followers, evict misplaced.

See docs/behaviour.md#exclusive-placement. Input: the cached pods of one Job placed by leader and
followers, and a lookup of node labels. Output: a `PodPlan`; the controller glue carries it out.

- No usable leader (none, or only terminating/finished ones), or the leader is not bound yet:
  nothing to do. Gated followers keep waiting; their gate says why (`SchedulingGated`).
- The leader is bound, but its node is gone or lacks the topology label: no follower is touched
  (upstream returns an error and retries; deleting followers then would not place them better).
  A Warning event on the leader says why its followers wait, and the Job is looked at again.
- The leader is bound in domain D:
  * a follower behind our gate is released: `nodeSelector[<topology>] = D` and our gate removed,
    other schedulers' gates kept (Kueue's, for example). A gated follower whose selector already
    names another domain cannot be corrected (a selector can only be added to) and is evicted;
  * an ungated follower is misplaced when its selector is missing or names another domain, or
    when it is bound to a node of another domain; it is evicted: condition
    `DisruptionTarget=True` (`ExclusivePlacementViolation`), then deleted. The Job controller
    creates a replacement, which the webhooks place. The leader is never evicted.

Only misplaced followers are evicted (upstream deletes all followers of the Job once one is
misplaced; the correctly placed ones would come back to the same domain, so deleting them only
costs work).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobset_controller.api.placement import (
    PLACEMENT_GATE,
    Pod,
    is_gated_by_us,
    is_leader,
    is_usable,
    node_name,
    node_selector,
    topology_key,
)
from jobset_controller.reconcile.catalogue import (
    LEADER_NODE_NOT_FOUND_EVENT,
    LEADER_NODE_WITHOUT_TOPOLOGY_EVENT,
    leader_node_not_found_message,
    leader_node_without_topology_message,
)

NodeLabels = Callable[[str], Mapping[str, str] | None]

# How soon a Job whose leader's domain cannot be read is looked at again (a node label change or
# a new leader wakes it earlier).
RETRY_UNREADABLE_DOMAIN_SECONDS = 10.0


@dataclass(frozen=True)
class Release:
    """Set `selector_key: domain` on a gated follower and keep only `gates` (ours removed)."""

    pod: str
    resource_version: str
    selector_key: str
    domain: str
    gates: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Eviction:
    pod: str
    uid: str
    condition_present: bool  # DisruptionTarget=True already set (a retried eviction)


@dataclass(frozen=True)
class LeaderWarning:
    pod: str
    uid: str
    reason: str
    message: str


@dataclass(frozen=True)
class PodPlan:
    releases: tuple[Release, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    warnings: tuple[LeaderWarning, ...] = ()
    requeue_after: float | None = None


def _name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _disruption_target_set(pod: Pod) -> bool:
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _eviction(pod: Pod) -> Eviction:
    return Eviction(_name(pod), _uid(pod), _disruption_target_set(pod))


def plan_pods(pods: Sequence[Pod], node_labels: NodeLabels) -> PodPlan:
    """What to do with one Job's pods (module docstring)."""
    usable = [pod for pod in pods if is_usable(pod)]
    topology = next((key for key in map(topology_key, usable) if key), None)
    if topology is None:
        return PodPlan()
    leaders = [pod for pod in usable if is_leader(pod)]
    followers = [pod for pod in usable if not is_leader(pod)]
    if len(leaders) != 1 or not node_name(leaders[0]) or not followers:
        return PodPlan()
    leader = leaders[0]
    node = node_name(leader)
    labels = node_labels(node)
    if labels is None or topology not in labels:
        warning = (
            LeaderWarning(
                _name(leader),
                _uid(leader),
                LEADER_NODE_NOT_FOUND_EVENT,
                leader_node_not_found_message(node),
            )
            if labels is None
            else LeaderWarning(
                _name(leader),
                _uid(leader),
                LEADER_NODE_WITHOUT_TOPOLOGY_EVENT,
                leader_node_without_topology_message(node, topology),
            )
        )
        return PodPlan(warnings=(warning,), requeue_after=RETRY_UNREADABLE_DOMAIN_SECONDS)
    domain = labels[topology]
    releases: list[Release] = []
    evictions: list[Eviction] = []
    for follower in followers:
        selected = node_selector(follower).get(topology)
        if is_gated_by_us(follower):
            if selected is not None and selected != domain:
                evictions.append(_eviction(follower))
                continue
            gates = tuple(
                gate
                for gate in (follower.get("spec") or {}).get("schedulingGates") or ()
                if gate.get("name") != PLACEMENT_GATE
            )
            meta = follower.get("metadata") or {}
            releases.append(
                Release(
                    _name(follower), str(meta.get("resourceVersion") or ""), topology, domain, gates
                )
            )
            continue
        bound = node_name(follower)
        bound_labels = node_labels(bound) if bound else None
        bound_elsewhere = bound_labels is not None and bound_labels.get(topology) != domain
        if selected != domain or bound_elsewhere:
            evictions.append(_eviction(follower))
    return PodPlan(releases=tuple(releases), evictions=tuple(evictions))
