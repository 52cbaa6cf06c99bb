"""AdmissionReview handling for JobSet pods (exclusive placement), without I/O.

See docs/behaviour.md#exclusive-placement. Upstream's two pod webhooks, same paths, names and
messages (`/mutate--v1-pod` = `mpod.kb.io`, `/validate--v1-pod` = `vpod.kb.io`, CREATE only):

- Mutating, for a JobSet pod (the jobset-name annotation) not using the node-selector strategy:
  the label `jobset.sigs.k8s.io/priority: <spec.priority>`; then, for a pod placed by leader and
  followers (`placed_by_leader`: the exclusive-topology annotation, as upstream decides, so the
  pods of Jobs upstream created are placed too), the leader (completion index 0) gets the
  required affinity terms (with the priority match) and a follower gets
  `nodeSelector[<topology>]` = its bound leader's node label. A leader node that lacks the label
  is an admission error, and so is a missing one except in `FollowerMode.GATE`, where the
  follower waits behind the gate instead.
- Validating: a follower of such a Job must carry that nodeSelector and its leader must be
  bound; otherwise the create is refused with upstream's "expected, transient error", the Job
  controller retries with backoff, and the follower appears once the leader is bound.

Beyond upstream, `FollowerMode.GATE`: a follower whose leader is not bound yet (or not found) is
admitted with the scheduling gate `jobset.sigs.k8s.io/exclusive-placement` instead of being
refused; the pod controller sets its nodeSelector and removes the gate once the leader is bound.
Why: a refused create costs an API round trip and a Job-controller backoff per follower per try;
a gated pod costs one patch and starts the moment its leader is bound. Only followers of Jobs this
controller created for leader and followers are gated (`may_gate`, the template label); the
followers of Jobs upstream created are refused as upstream refuses them. The server stops gating
at shutdown (`WebhookServer.stop_gating`): a successor that is upstream's controller never
releases a gate.

Beyond upstream, opt-in (`exclusivePlacement.followerNodeAffinity`): a follower placed here also
gets a required node affinity naming the domain's nodes (`metadata.name In [<node>]`, one node
selector term per node, since the API server takes one name per field requirement; at most
`MAX_DOMAIN_NODE_TERMS` terms, else it keeps only its nodeSelector), so kube-scheduler's PreFilter
hands it those nodes instead of filtering the whole cluster for them. The names are the node
cache's at admission: a node that joins the domain later is not in the list of a follower
admitted before (it waits for the listed nodes), a node that leaves stays in the list and
matches nothing. A follower released from the gate by the pod controller keeps only its
nodeSelector.

Pods of a Job this controller created in the affinity-in-job fallback (`affinity_in_template`)
are left alone apart from the priority label: their template places them.

The I/O (the leader and node lookups, from the controller's caches) is injected as `Lookups`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from jobset_controller.api import JOB_KEY, PRIORITY_KEY
from jobset_controller.api.placement import (
    MAX_DOMAIN_NODE_TERMS,
    PLACEMENT_GATE,
    Pod,
    exclusive_terms,
    find_leader,
    is_gated_by_us,
    is_jobset_pod,
    is_leader,
    labels_of,
    leader_name,
    may_gate,
    node_name,
    node_name_terms,
    placed_by_leader,
    topology_key,
    uses_node_selector_strategy,
    with_node_names,
    with_terms,
)
from jobset_controller.webhook.review import request_of, response

MUTATE_POD_PATH = "/mutate--v1-pod"
VALIDATE_POD_PATH = "/validate--v1-pod"

FOLLOWER_SELECTOR_NOT_SET = "follower pod node selector not set"
LEADER_NOT_SCHEDULED = (
    "leader pod not yet scheduled, not creating follower pod. this is an expected, transient error"
)


def missing_selector_message(key: str) -> str:
    return f"follower pod node selector for topology domain not found. missing selector: {key}"


def node_not_found_message(node: str) -> str:
    return f'nodes "{node}" not found'


def node_without_topology_message(key: str) -> str:
    return f"node does not have topology label: {key}"


class FollowerMode(StrEnum):
    """What happens to a follower created before its leader is bound (the Configuration's
    `exclusivePlacement.followers`)."""

    GATE = "Gate"  # admitted behind a scheduling gate; the pod controller releases it
    REJECT = "Reject"  # upstream: refused, the Job controller retries (the default)


@dataclass(frozen=True)
class Lookups:
    """The webhook's view of the cluster (the controller's caches).

    leaders: (namespace, leader name without suffix) -> the pods of that name, any state.
    node_labels: node name -> its labels, None when the node does not exist.
    domain_nodes: see the field.
    """

    leaders: Callable[[str, str], Sequence[Pod]]
    node_labels: Callable[[str], Mapping[str, str] | None]
    # (topology key, domain) -> the domain's node names; None unless followers are narrowed
    # (Configuration `exclusivePlacement.followerNodeAffinity`).
    domain_nodes: Callable[[str, str], Sequence[str]] | None = None


@dataclass(frozen=True)
class PodMutation:
    """The changed pod (None: unchanged), or the error that refuses it."""

    pod: dict[str, Any] | None = None
    error: str | None = None


def _leader_of(pod: Pod, namespace: str, lookups: Lookups) -> tuple[Pod | None, str | None]:
    name = leader_name(pod)
    candidates = lookups.leaders(namespace, name) if name is not None else ()
    found = find_leader(pod, candidates)
    return found.leader, found.error


def decide_mutation(pod: Pod, namespace: str, lookups: Lookups, mode: FollowerMode) -> PodMutation:
    """What the mutating webhook does to `pod` (module docstring)."""
    if not is_jobset_pod(pod) or uses_node_selector_strategy(pod):
        return PodMutation()
    # Every change below assigns a member of metadata or spec and changes none in place, so
    # copies of those two mappings leave `pod` as it was (a deep copy of the whole pod was two
    # thirds of the handler's CPU, profiled in-process).
    out = {**pod, "metadata": dict(pod.get("metadata") or {}), "spec": dict(pod.get("spec") or {})}
    meta, spec = out["metadata"], out["spec"]
    changed = False
    priority = spec.get("priority")
    if priority is not None:
        meta["labels"] = {**(meta.get("labels") or {}), PRIORITY_KEY: str(priority)}
        changed = True
    topology = topology_key(pod)
    if topology is None or not placed_by_leader(pod):
        return PodMutation(out if changed else None)
    if is_leader(pod):
        own_key = labels_of(pod).get(JOB_KEY, "")
        own_priority = (meta.get("labels") or {}).get(PRIORITY_KEY, "")
        spec["affinity"] = with_terms(
            spec.get("affinity"), exclusive_terms(own_key, topology, own_priority)
        )
        return PodMutation(out)
    leader, _ = _leader_of(pod, namespace, lookups)
    node = node_name(leader) if leader is not None else ""
    labels = lookups.node_labels(node) if node else None
    gate = mode is FollowerMode.GATE and may_gate(pod)
    if leader is None or not node or (labels is None and gate):
        # Not placeable yet: wait behind our gate, or (upstream) leave it to the validating
        # webhook to refuse. A vanished leader node is waited out in gate mode too: the pod GC
        # removes that leader and the Job controller creates a new one.
        if gate and not is_gated_by_us(pod):
            spec["schedulingGates"] = [
                *(spec.get("schedulingGates") or []),
                {"name": PLACEMENT_GATE},
            ]
            return PodMutation(out)
        return PodMutation(out if changed else None)
    if labels is None:
        return PodMutation(error=node_not_found_message(node))
    if topology not in labels:
        return PodMutation(error=node_without_topology_message(topology))
    domain = labels[topology]
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), topology: domain}
    if lookups.domain_nodes is not None:
        names = lookups.domain_nodes(topology, domain)
        if names and node_name_terms(spec.get("affinity"), names) <= MAX_DOMAIN_NODE_TERMS:
            spec["affinity"] = with_node_names(spec.get("affinity"), names)
    return PodMutation(out)


def decide_validation(pod: Pod, namespace: str, lookups: Lookups, mode: FollowerMode) -> str | None:
    """Why the validating webhook refuses `pod` (upstream's message), or None to admit it."""
    topology = topology_key(pod)
    if not is_jobset_pod(pod) or topology is None or not placed_by_leader(pod) or is_leader(pod):
        return None
    if mode is FollowerMode.GATE and may_gate(pod) and is_gated_by_us(pod):
        return None  # the pod controller places it once the leader is bound
    selector = (pod.get("spec") or {}).get("nodeSelector")
    if selector is None:
        return FOLLOWER_SELECTOR_NOT_SET
    if topology not in selector:
        return missing_selector_message(topology)
    leader, error = _leader_of(pod, namespace, lookups)
    if error is not None:
        return error
    if leader is None or not node_name(leader):
        return LEADER_NOT_SCHEDULED
    return None


# ---------------------------------------------------------------------------- AdmissionReview
def _denied(review: Mapping[str, Any], message: str) -> dict[str, Any]:
    """controller-runtime's `Denied`: 403 Forbidden with the decision's message."""
    status = {"status": "Failure", "code": 403, "reason": "Forbidden", "message": message}
    return response(review, allowed=False, status=status)


def _pod_of(review: Mapping[str, Any]) -> tuple[Pod | None, str]:
    request = request_of(review)
    obj = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(obj, Mapping):
        return None, ""
    namespace = str(request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
    return obj, namespace


def mutate_pod(review: Mapping[str, Any], lookups: Lookups, mode: FollowerMode) -> dict[str, Any]:
    pod, namespace = _pod_of(review)
    if pod is None:
        return response(review, allowed=True)
    decision = decide_mutation(pod, namespace, lookups, mode)
    if decision.error is not None:
        return _denied(review, decision.error)
    if decision.pod is None:
        return response(review, allowed=True)
    patch = _patch(pod, decision.pod)
    if not patch:
        return response(review, allowed=True)
    return response(
        review,
        allowed=True,
        patchType="JSONPatch",
        patch=base64.b64encode(orjson.dumps(patch)).decode(),
    )


def validate_pod(review: Mapping[str, Any], lookups: Lookups, mode: FollowerMode) -> dict[str, Any]:
    pod, namespace = _pod_of(review)
    if pod is None:
        return response(review, allowed=True)
    refusal = decide_validation(pod, namespace, lookups, mode)
    if refusal is not None:
        return _denied(review, refusal)
    return response(review, allowed=True)


def _patch(before: Pod, after: Pod) -> list[dict[str, Any]]:
    """JSON Patch ops for the members the mutation may change (`add` replaces a member)."""
    ops: list[dict[str, Any]] = []
    for section, field in (
        ("metadata", "labels"),
        ("spec", "affinity"),
        ("spec", "nodeSelector"),
        ("spec", "schedulingGates"),
    ):
        old = (before.get(section) or {}).get(field)
        new = (after.get(section) or {}).get(field)
        if new != old:
            ops.append({"op": "add", "path": f"/{section}/{field}", "value": new})
    return ops
