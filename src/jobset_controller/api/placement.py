"""Exclusive placement on the pod level: which pod is a Job's leader, where it is, what it needs.

See docs/behaviour.md#exclusive-placement. With the pod webhooks active, a Job's pods are placed
by leader and followers: the leader (completion index 0) carries a required pod affinity to its
own Job and a required anti-affinity to other Jobs of the same priority on the topology label,
and every other pod (a follower) is pinned to the leader's domain with a nodeSelector.

Why these facts live in the API package: the pod webhooks (admission) and the pod controller
(repair and un-gating) must read a pod the same way, and neither may import the other's room;
both import this module. Everything here is pure and reads raw pod dicts, because a pod is not a
JobSet type this package models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api.constants import (
    EXCLUSIVE_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOBSET_NAME_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    PRIORITY_KEY,
    REPLICATED_JOB_NAME_KEY,
)

# The pod template label the controller writes on Jobs placed by leader and followers (pod
# webhooks active when the Job was created). Whether a pod is placed by leader and followers is
# decided by its annotations, as upstream decides it (`placed_by_leader`); the label says that
# this controller built the Job for it, which is what allows the follower gate (`may_gate`).
PLACEMENT_LABEL: Final = "jobset.sigs.k8s.io/exclusive-placement"
LEADER_FOLLOWER: Final = "leader-follower"
# The scheduling gate a follower waits behind (gate mode) until its leader is bound.
PLACEMENT_GATE: Final = "jobset.sigs.k8s.io/exclusive-placement"
COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
# The pod webhooks' names (upstream's, registered in manifests/webhook). Here and not in the
# webhook package because the placement-mode probe (controller) recognises a refusal by the name
# the API server quotes ('admission webhook "vpod.kb.io" denied the request'), and controller may
# not import webhook; the webhook server logs its refusals under the same names.
POD_MUTATING_WEBHOOK: Final = "mpod.kb.io"
POD_VALIDATING_WEBHOOK: Final = "vpod.kb.io"
# The names the API server may quote for the validating pod webhook: the manifests' (upstream's
# kustomize names, above) and the Helm chart's (upstream's chart names its webhooks after their
# paths, and ours keeps those names so a release can switch charts).
POD_VALIDATING_WEBHOOK_NAMES: Final = (POD_VALIDATING_WEBHOOK, "validate--v1-pod.x-k8s.io")
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"

Pod = Mapping[str, Any]


def _meta(pod: Pod) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _spec(pod: Pod) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def labels_of(pod: Pod) -> Mapping[str, str]:
    return _meta(pod).get("labels") or {}


def annotations_of(pod: Pod) -> Mapping[str, str]:
    return _meta(pod).get("annotations") or {}


def is_jobset_pod(pod: Pod) -> bool:
    """Upstream's test: the jobset-name ANNOTATION (labels can be edited away, annotations of
    the pod template are what the Job controller copies verbatim)."""
    return JOBSET_NAME_KEY in annotations_of(pod)


def uses_node_selector_strategy(pod: Pod) -> bool:
    return NODE_SELECTOR_STRATEGY_KEY in annotations_of(pod)


def topology_key(pod: Pod) -> str | None:
    """The node label that defines this pod's domain, for affinity-strategy exclusive pods."""
    annotations = annotations_of(pod)
    if NODE_SELECTOR_STRATEGY_KEY in annotations:
        return None
    return annotations.get(EXCLUSIVE_KEY)


def affinity_in_template(pod: Pod) -> bool:
    """The pod carries the exclusive terms this controller writes into a Job's template in the
    affinity-in-job fallback: a required anti-affinity to other `job-key`s with no priority
    match. Leaders placed by a pod webhook (ours or upstream's) always get the priority match, so
    this tells a fallback Job's pods apart from them, before and after admission."""
    anti = ((_spec(pod).get("affinity") or {}).get("podAntiAffinity") or {}).get(_REQUIRED) or ()
    for term in anti:
        keys = {
            (e.get("key"), e.get("operator"))
            for e in (term.get("labelSelector") or {}).get("matchExpressions") or ()
        }
        if (JOB_KEY, "NotIn") in keys and not any(key == PRIORITY_KEY for key, _ in keys):
            return True
    return False


def placed_by_leader(pod: Pod) -> bool:
    """The pod is placed by leader and followers, decided as upstream decides it: a JobSet pod
    (the jobset-name annotation) with the exclusive-topology annotation and without the
    node-selector strategy, whoever created its Job. The one exception is a Job this controller
    created in the affinity-in-job fallback (`affinity_in_template`): the scheduler places those
    pods from their template, and a Job keeps the placement it was created with."""
    return is_jobset_pod(pod) and topology_key(pod) is not None and not affinity_in_template(pod)


def may_gate(pod: Pod) -> bool:
    """A follower may wait behind our scheduling gate (`FollowerMode.GATE`) only when this
    controller created its Job for leader and followers (the template label): followers of any
    other Job (upstream's, after an upgrade) are refused until their leader is bound, as upstream
    refuses them, so that no controller but ours ever has to release a gate."""
    return labels_of(pod).get(PLACEMENT_LABEL) == LEADER_FOLLOWER


def is_leader(pod: Pod) -> bool:
    return annotations_of(pod).get(COMPLETION_INDEX_ANNOTATION) == "0"


def leader_name(pod: Pod) -> str | None:
    """`<jobset>-<replicatedJob>-<jobIndex>-0`: the leader's name without the random suffix,
    built from the follower's labels (None when one is missing)."""
    labels = labels_of(pod)
    parts = [labels.get(k) for k in (JOBSET_NAME_KEY, REPLICATED_JOB_NAME_KEY, JOB_INDEX_KEY)]
    if any(part is None for part in parts):
        return None
    return "-".join(str(part) for part in parts) + "-0"


def missing_name_label(pod: Pod) -> str | None:
    """The first of the labels `leader_name` needs that the pod lacks."""
    labels = labels_of(pod)
    for key in (JOBSET_NAME_KEY, REPLICATED_JOB_NAME_KEY, JOB_INDEX_KEY):
        if key not in labels:
            return key
    return None


def name_without_suffix(pod: Pod) -> str:
    """A Job's pod is named `<job>-<index>-<random>`: the lookup key of a leader pod."""
    name = str(_meta(pod).get("name") or "")
    return name.rsplit("-", 1)[0] if "-" in name else name


def owner_uid(pod: Pod) -> str | None:
    """The UID of the pod's controller (its Job)."""
    for ref in _meta(pod).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid") or "") or None
    return None


def is_usable(pod: Pod) -> bool:
    """Not terminating, not Failed, not Succeeded: a pod that still counts (a finished or dying
    leader must not place followers, upstream #1021/#1187)."""
    if _meta(pod).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")


def finished_leader(follower: Pod, candidates: Sequence[Pod]) -> list[Pod]:
    """The leader of `follower`'s own Job that Succeeded, bound and not being deleted, if it
    is the only one (`find_leader`); else none. A Failed leader is never taken: the Job
    controller replaces it, and the new one decides the domain."""
    done = [
        pod
        for pod in candidates
        if (pod.get("status") or {}).get("phase") == "Succeeded"
        and not _meta(pod).get("deletionTimestamp")
        and node_name(pod)
        and owner_uid(pod) == owner_uid(follower)
    ]
    return done if len(done) == 1 else []


def node_name(pod: Pod) -> str:
    return str(_spec(pod).get("nodeName") or "")


def node_selector(pod: Pod) -> Mapping[str, str]:
    return _spec(pod).get("nodeSelector") or {}


def scheduling_gates(pod: Pod) -> list[str]:
    return [str(g.get("name")) for g in _spec(pod).get("schedulingGates") or ()]


def is_gated_by_us(pod: Pod) -> bool:
    return PLACEMENT_GATE in scheduling_gates(pod)


@dataclass(frozen=True)
class LeaderLookup:
    """The answer of a leader lookup: the leader, or why there is none (upstream's messages)."""

    leader: Pod | None
    error: str | None


def find_leader(follower: Pod, candidates: Sequence[Pod]) -> LeaderLookup:
    """The one usable pod named `leader_name(follower)` among `candidates`, owned by the same Job.

    `candidates` are the pods whose name without suffix is the leader's name (any state).

    When no candidate is usable but one leader of this follower's Job has Succeeded, that one
    is taken (`finished_leader`): its index is done and is never run again, so it names the Job's
    domain for good. Upstream v0.12.0 takes it as well (it ignores only terminating leaders);
    upstream's main since kubernetes-sigs/jobset#1276 ignores Failed and Succeeded ones alike and
    then refuses the followers for ever: a Job whose leader finishes before its followers are
    created (the Job controller retries a refused follower with a growing back-off, so a short
    leader often does) never completes and its JobSet hangs (found by the soak, hack/soak.py).
    """
    name = leader_name(follower)
    if name is None:
        return LeaderLookup(None, f"pod missing label: {missing_name_label(follower)}")
    usable = [pod for pod in candidates if is_usable(pod)]
    if not usable:
        usable = finished_leader(follower, candidates)
    if len(usable) != 1:
        return LeaderLookup(
            None,
            f"expected 1 leader pod ({name}), but got {len(usable)}. "
            "this is an expected, transient error",
        )
    leader = usable[0]
    follower_owner, leader_owner = owner_uid(follower), owner_uid(leader)
    if follower_owner is None:
        return LeaderLookup(None, "follower pod has no owner reference")
    if leader_owner is None:
        return LeaderLookup(
            None, f'leader pod "{_meta(leader).get("name")}" has no owner reference'
        )
    if follower_owner != leader_owner:
        return LeaderLookup(
            None,
            f"follower pod owner UID ({follower_owner}) != leader pod owner UID ({leader_owner})",
        )
    return LeaderLookup(leader, None)


def exclusive_terms(
    own_job_key: str, topology: str, priority: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The required (podAffinity, podAntiAffinity) terms of a leader.

    With `priority` (the pod webhook knows the pod's resolved priority) the anti-affinity matches
    only pods of that priority, so a higher-priority Job may share a domain; without it (the
    controller's fallback, written before any pod exists) it matches every other Job.
    """
    affinity = {
        "labelSelector": {
            "matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": [own_job_key]}]
        },
        "topologyKey": topology,
        "namespaceSelector": {},
    }
    expressions: list[dict[str, Any]] = [
        {"key": JOB_KEY, "operator": "Exists"},
        {"key": JOB_KEY, "operator": "NotIn", "values": [own_job_key]},
    ]
    if priority is not None:
        expressions.append({"key": PRIORITY_KEY, "operator": "In", "values": [priority]})
    anti_affinity = {
        "labelSelector": {"matchExpressions": expressions},
        "topologyKey": topology,
        "namespaceSelector": {},
    }
    return affinity, anti_affinity


def with_terms(affinity: Mapping[str, Any] | None, terms: tuple[Any, Any]) -> dict[str, Any]:
    """`affinity` (a pod's spec.affinity) with the two terms appended to the required lists."""
    out = dict(affinity or {})
    for kind, term in zip(("podAffinity", "podAntiAffinity"), terms, strict=True):
        section = dict(out.get(kind) or {})
        section[_REQUIRED] = [*(section.get(_REQUIRED) or []), term]
        out[kind] = section
    return out


# The most node selector terms a follower's narrowing affinity may hold (one per node name and
# term of the template): above it the follower keeps only its nodeSelector (about 70 bytes a
# term: 256 terms add some 18 KB to every follower as stored).
MAX_DOMAIN_NODE_TERMS: Final = 256


def node_name_terms(affinity: Mapping[str, Any] | None, names: Sequence[str]) -> int:
    """How many node selector terms `with_node_names` would write."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    terms = (node_affinity.get(_REQUIRED) or {}).get("nodeSelectorTerms") or [{}]
    return len(terms) * len(names)


def with_node_names(affinity: Mapping[str, Any] | None, names: Sequence[str]) -> dict[str, Any]:
    """`affinity` whose required node affinity also says `metadata.name` is one of `names`.

    The API server takes exactly one value for a `metadata.name` field requirement, so each name
    is a term of its own; the terms are ORed and the requirements of one term ANDed, so every
    term of the template is repeated once per name with that name added (a template without
    terms: one term per name). Why names in every term: kube-scheduler's node affinity PreFilter
    hands the scheduler just the named nodes when every term names one, instead of filtering
    every node of the cluster."""
    out = dict(affinity or {})
    node_affinity = dict(out.get("nodeAffinity") or {})
    required = dict(node_affinity.get(_REQUIRED) or {})
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {
            **term,
            "matchFields": [
                *(term.get("matchFields") or []),
                {"key": "metadata.name", "operator": "In", "values": [name]},
            ],
        }
        for term in terms
        for name in names
    ]
    node_affinity[_REQUIRED] = required
    out["nodeAffinity"] = node_affinity
    return out
