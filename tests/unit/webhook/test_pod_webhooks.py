"""The pod webhooks' decisions as pure functions, table-driven, with upstream's messages."""
# ruff: noqa: E501  (the decision tables read best one case per line)

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

from jobset_controller.api.placement import (
    LEADER_FOLLOWER,
    MAX_DOMAIN_NODE_TERMS,
    PLACEMENT_GATE,
    PLACEMENT_LABEL,
    affinity_in_template,
    exclusive_terms,
    with_terms,
)
from jobset_controller.webhook.pods import (
    FOLLOWER_SELECTOR_NOT_SET,
    LEADER_NOT_SCHEDULED,
    FollowerMode,
    Lookups,
    decide_mutation,
    decide_validation,
    missing_selector_message,
    mutate_pod,
    validate_pod,
)

RACK = "rack"
GATE, REJECT = FollowerMode.GATE, FollowerMode.REJECT


def pod(
    index: int,
    *,
    node: str = "",
    selector: Mapping[str, str] | None = None,
    gates: Sequence[str] = (),
    owner: str = "job-uid",
    labelled: bool = True,
    exclusive: bool = True,
    node_selector_strategy: bool = False,
    priority: int | None = 0,
    phase: str = "Pending",
    deleting: bool = False,
) -> dict[str, Any]:
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "js",
        "jobset.sigs.k8s.io/replicatedjob-name": "w",
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/job-key": "key0",
    }
    if labelled:
        labels[PLACEMENT_LABEL] = LEADER_FOLLOWER
    annotations = {
        "jobset.sigs.k8s.io/jobset-name": "js",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    if exclusive:
        annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = RACK
    if node_selector_strategy:
        annotations["alpha.jobset.sigs.k8s.io/node-selector"] = "true"
    meta: dict[str, Any] = {
        "name": f"js-w-0-{index}-abcde",
        "namespace": "ns",
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [{"uid": owner, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if priority is not None:
        spec["priority"] = priority
    if node:
        spec["nodeName"] = node
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


NODES = {"n1": {RACK: "r1"}, "bare": {}}


def lookups(*leaders: dict[str, Any]) -> Lookups:
    return Lookups(leaders=lambda ns, name: list(leaders), node_labels=NODES.get)


# (case, follower, leaders, mode) -> (nodeSelector, gated, error)
MUTATIONS = [
    ("bound leader pins the follower", pod(1), [pod(0, node="n1")], REJECT, {RACK: "r1"}, False, None),
    ("bound leader pins the follower (gate)", pod(1), [pod(0, node="n1")], GATE, {RACK: "r1"}, False, None),
    ("unbound leader: reject leaves it", pod(1), [pod(0)], REJECT, None, False, None),
    ("unbound leader: gate", pod(1), [pod(0)], GATE, None, True, None),
    ("no leader: gate", pod(1), [], GATE, None, True, None),
    ("terminal leader ignored: gate", pod(1), [pod(0, node="n1", phase="Failed")], GATE, None, True, None),
    ("terminating leader ignored", pod(1), [pod(0, node="n1", deleting=True)], REJECT, None, False, None),
    ("two leaders, one terminal", pod(1), [pod(0, node="n1", phase="Succeeded"), pod(0, node="n1")], REJECT, {RACK: "r1"}, False, None),
    ("leader already succeeded pins the follower", pod(1), [pod(0, node="n1", phase="Succeeded")], REJECT, {RACK: "r1"}, False, None),
    ("leader already succeeded pins the follower (gate)", pod(1), [pod(0, node="n1", phase="Succeeded")], GATE, {RACK: "r1"}, False, None),
    ("succeeded leader of another Job ignored", pod(1), [pod(0, node="n1", phase="Succeeded", owner="old")], GATE, None, True, None),
    ("succeeded leader being deleted ignored", pod(1), [pod(0, node="n1", phase="Succeeded", deleting=True)], REJECT, None, False, None),
    ("leader of another Job", pod(1), [pod(0, node="n1", owner="old")], GATE, None, True, None),
    ("leader node gone: reject", pod(1), [pod(0, node="gone")], REJECT, None, False, 'nodes "gone" not found'),
    ("leader node gone: gate waits", pod(1), [pod(0, node="gone")], GATE, None, True, None),
    ("leader node without label", pod(1), [pod(0, node="bare")], GATE, None, False, "node does not have topology label: rack"),
    ("wrong selector is overwritten", pod(1, selector={RACK: "r9"}), [pod(0, node="n1")], REJECT, {RACK: "r1"}, False, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("follower", "leaders", "mode", "selector", "gated", "error"),
    [case[1:] for case in MUTATIONS],
    ids=[case[0] for case in MUTATIONS],
)
def test_follower_mutation(
    follower: dict[str, Any],
    leaders: list[dict[str, Any]],
    mode: FollowerMode,
    selector: dict[str, str] | None,
    gated: bool,
    error: str | None,
) -> None:
    decision = decide_mutation(follower, "ns", lookups(*leaders), mode)
    assert decision.error == error
    if error is not None:
        return
    assert decision.pod is not None  # the priority label at least
    spec = decision.pod["spec"]
    assert spec.get("nodeSelector") == selector
    assert (PLACEMENT_GATE in [g["name"] for g in spec.get("schedulingGates") or ()]) == gated
    assert decision.pod["metadata"]["labels"]["jobset.sigs.k8s.io/priority"] == "0"


@pytest.mark.parametrize(
    ("candidate", "leaders", "mode"),
    [case[1:4] for case in MUTATIONS]
    + [(pod(0, priority=7), [], GATE), (pod(2, selector={RACK: "r9"}, gates=("x",)), [], GATE)],
)
def test_deciding_a_mutation_leaves_the_reviewed_pod_as_it_was(
    candidate: dict[str, Any], leaders: list[dict[str, Any]], mode: FollowerMode
) -> None:
    """The JSON patch is the difference between the reviewed pod and the decision's: a decision
    that changed the reviewed pod in place would patch nothing (and change a caller's copy)."""
    before = copy.deepcopy(candidate)
    decision = decide_mutation(candidate, "ns", lookups(*leaders), mode)
    assert candidate == before
    assert decision.pod is None or decision.pod != before


def test_leader_gets_affinity_with_priority_match_and_others_untouched() -> None:
    decision = decide_mutation(pod(0, priority=7), "ns", lookups(), GATE)
    assert decision.pod is not None
    affinity = decision.pod["spec"]["affinity"]
    term = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    anti = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == anti["topologyKey"] == RACK
    assert term["namespaceSelector"] == anti["namespaceSelector"] == {}
    assert {"key": "jobset.sigs.k8s.io/priority", "operator": "In", "values": ["7"]} in anti[
        "labelSelector"
    ]["matchExpressions"]
    # Node-selector strategy and non-JobSet pods: nothing at all (not even the priority label).
    assert decide_mutation(pod(1, node_selector_strategy=True), "ns", lookups(), GATE).pod is None
    foreign = pod(1)
    del foreign["metadata"]["annotations"]["jobset.sigs.k8s.io/jobset-name"]
    assert decide_mutation(foreign, "ns", lookups(), GATE).pod is None
    # Not exclusive: priority label only.
    plain = decide_mutation(pod(1, exclusive=False), "ns", lookups(), GATE).pod
    assert plain is not None
    assert "nodeSelector" not in plain["spec"]
    assert plain["metadata"]["labels"]["jobset.sigs.k8s.io/priority"] == "0"


def upstreams(candidate: dict[str, Any]) -> dict[str, Any]:
    """`candidate` as a pod of a Job upstream's controller created: no leader-follower label."""
    del candidate["metadata"]["labels"][PLACEMENT_LABEL]
    return candidate


@pytest.mark.parametrize(
    ("follower", "leaders", "mode"),
    [case[1:4] for case in MUTATIONS],
    ids=[case[0] for case in MUTATIONS],
)
def test_pods_of_upstreams_jobs_are_placed_as_upstream_places_them_in_either_mode(
    follower: dict[str, Any], leaders: list[dict[str, Any]], mode: FollowerMode
) -> None:
    """The decision is the pod's annotations, not our label: a follower of a Job upstream created
    (after an upgrade, the Job controller recreating a pod) is pinned to its leader's domain,
    refused or left for the validating webhook exactly as in Reject mode (upstream's behaviour,
    the table above), whatever the configured mode: it is never gated."""
    reference = decide_mutation(follower, "ns", lookups(*leaders), REJECT)
    decision = decide_mutation(upstreams(follower), "ns", lookups(*leaders), mode)
    assert decision.error == reference.error
    if reference.pod is None:
        assert decision.pod is None
        return
    assert decision.pod is not None
    assert decision.pod["spec"] == reference.pod["spec"]
    assert PLACEMENT_GATE not in [
        g["name"] for g in decision.pod["spec"].get("schedulingGates") or ()
    ]
    for candidate in (reference.pod, decision.pod):
        candidate["metadata"]["labels"].pop(PLACEMENT_LABEL, None)
    assert decision.pod["metadata"] == reference.pod["metadata"]
    # And the validating webhook answers it as it answers ours in Reject mode.
    assert decide_validation(decision.pod, "ns", lookups(*leaders), mode) == decide_validation(
        reference.pod, "ns", lookups(*leaders), REJECT
    )


def test_leader_of_upstreams_job_gets_upstreams_affinity_and_placed_follower_is_admitted() -> None:
    decision = decide_mutation(upstreams(pod(0, priority=3)), "ns", lookups(), GATE)
    assert decision.pod is not None
    affinity = decision.pod["spec"]["affinity"]
    assert affinity == with_terms(None, exclusive_terms("key0", RACK, "3"))
    assert not affinity_in_template(decision.pod)  # so the pod cache keeps it: followers find it
    leader = upstreams(pod(0, node="n1"))
    placed = upstreams(pod(1, selector={RACK: "r1"}))
    assert decide_validation(placed, "ns", lookups(leader), GATE) is None
    assert (
        decide_validation(upstreams(pod(1)), "ns", lookups(leader), GATE)
        == FOLLOWER_SELECTOR_NOT_SET
    )
    unbound = upstreams(pod(1, selector={RACK: "r1"}))
    assert (
        decide_validation(unbound, "ns", lookups(upstreams(pod(0))), GATE) == LEADER_NOT_SCHEDULED
    )
    # A gate on an upstream follower is not ours to honour: refused like any unplaced follower.
    hand_gated = upstreams(pod(1, gates=[PLACEMENT_GATE]))
    assert decide_validation(hand_gated, "ns", lookups(leader), GATE) == FOLLOWER_SELECTOR_NOT_SET


def fallback(candidate: dict[str, Any]) -> dict[str, Any]:
    """`candidate` as a pod of a Job we created in the affinity-in-job fallback: no label, the
    priority-less exclusive terms in its template."""
    candidate = upstreams(candidate)
    candidate["spec"]["affinity"] = with_terms(None, exclusive_terms("key0", RACK, None))
    return candidate


def test_pods_of_our_fallback_jobs_keep_their_template_placement() -> None:
    for index in (0, 1):
        decision = decide_mutation(fallback(pod(index)), "ns", lookups(), GATE)
        assert decision.error is None
        assert decision.pod is not None
        assert decision.pod["spec"]["affinity"] == fallback(pod(index))["spec"]["affinity"]
        assert "nodeSelector" not in decision.pod["spec"]
        assert "schedulingGates" not in decision.pod["spec"]
        assert decision.pod["metadata"]["labels"]["jobset.sigs.k8s.io/priority"] == "0"
        assert decide_validation(fallback(pod(index)), "ns", lookups(), REJECT) is None
    # A leader a webhook placed (terms with the priority match) is not taken for one.
    placed = decide_mutation(pod(0), "ns", lookups(), GATE).pod
    assert placed is not None
    assert not affinity_in_template(placed)
    assert affinity_in_template(fallback(pod(0)))


VALIDATIONS = [
    ("leader admitted", pod(0), [], REJECT, None),
    ("no selector", pod(1), [pod(0, node="n1")], REJECT, FOLLOWER_SELECTOR_NOT_SET),
    ("selector without topology", pod(1, selector={"x": "y"}), [pod(0, node="n1")], REJECT, missing_selector_message(RACK)),
    ("no leader", pod(1, selector={RACK: "r1"}), [], REJECT, "expected 1 leader pod (js-w-0-0), but got 0. this is an expected, transient error"),
    ("owner differs", pod(1, selector={RACK: "r1"}), [pod(0, node="n1", owner="old")], REJECT, "follower pod owner UID (job-uid) != leader pod owner UID (old)"),
    ("leader unbound", pod(1, selector={RACK: "r1"}), [pod(0)], REJECT, LEADER_NOT_SCHEDULED),
    ("placed follower", pod(1, selector={RACK: "r1"}), [pod(0, node="n1")], REJECT, None),
    ("follower of a succeeded leader", pod(1, selector={RACK: "r1"}), [pod(0, node="n1", phase="Succeeded")], REJECT, None),
    ("follower of a failed leader", pod(1, selector={RACK: "r1"}), [pod(0, node="n1", phase="Failed")], REJECT, "expected 1 leader pod (js-w-0-0), but got 0. this is an expected, transient error"),
    ("gated follower (gate mode)", pod(1, gates=[PLACEMENT_GATE]), [], GATE, None),
    ("gated follower (reject mode)", pod(1, gates=[PLACEMENT_GATE]), [], REJECT, FOLLOWER_SELECTOR_NOT_SET),
    ("someone else's gate only", pod(1, gates=["kueue.x-k8s.io/topology"]), [], GATE, FOLLOWER_SELECTOR_NOT_SET),
]  # fmt: skip


@pytest.mark.parametrize(
    ("candidate", "leaders", "mode", "refusal"),
    [case[1:] for case in VALIDATIONS],
    ids=[case[0] for case in VALIDATIONS],
)
def test_follower_validation(
    candidate: dict[str, Any],
    leaders: list[dict[str, Any]],
    mode: FollowerMode,
    refusal: str | None,
) -> None:
    assert decide_validation(candidate, "ns", lookups(*leaders), mode) == refusal


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"request": {"uid": "u1", "operation": "CREATE", "namespace": "ns", "object": obj}}


def test_reviews_carry_a_json_patch_and_controller_runtime_denials() -> None:
    answer = mutate_pod(review(pod(1)), lookups(pod(0)), GATE)["response"]
    assert answer["allowed"] is True
    patch = orjson.loads(base64.b64decode(answer["patch"]))
    paths = {op["path"]: op["value"] for op in patch}
    assert paths["/spec/schedulingGates"] == [{"name": PLACEMENT_GATE}]
    assert paths["/metadata/labels"]["jobset.sigs.k8s.io/priority"] == "0"
    denied = validate_pod(review(pod(1)), lookups(pod(0)), REJECT)["response"]
    assert denied == {
        "uid": "u1",
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": FOLLOWER_SELECTOR_NOT_SET,
        },
    }
    error = mutate_pod(review(pod(1)), lookups(pod(0, node="bare")), REJECT)["response"]
    assert error["allowed"] is False
    assert error["status"]["message"] == "node does not have topology label: rack"


def test_a_stopping_server_no_longer_gates_followers() -> None:
    """At shutdown (`WebhookServer.stop_gating`) a follower of our own Job whose leader is not
    bound is refused, as upstream refuses it, instead of gated: the successor may be upstream's
    controller, which would never release the gate."""
    import ssl

    from jobset_controller.api import FeatureGates
    from jobset_controller.webhook.server import WebhookServer

    server = WebhookServer(
        lookup_claim=None,
        features=FeatureGates.from_mapping({}),
        ssl_context=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
        port=0,
        pod_lookups=lookups(pod(0)),
        follower_mode=GATE,
    )
    assert server._follower_mode is GATE
    server.stop_gating()
    assert server._follower_mode is REJECT
    decision = decide_mutation(pod(1), "ns", lookups(pod(0)), server._follower_mode)
    assert decision.pod is not None
    assert "schedulingGates" not in decision.pod["spec"]
    assert (
        decide_validation(decision.pod, "ns", lookups(pod(0)), REJECT) == FOLLOWER_SELECTOR_NOT_SET
    )


# ------------------------------------------------- follower narrowing (followerNodeAffinity)
def narrowing(domains: dict[str, tuple[str, ...]], *leaders: dict[str, Any]) -> Lookups:
    return Lookups(
        leaders=lambda ns, name: list(leaders),
        node_labels=NODES.get,
        domain_nodes=lambda key, value: domains.get(value, ()) if key == RACK else (),
    )


def required_terms(decided: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = decided["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return list((required or {}).get("nodeSelectorTerms") or [])


def name_of(term: dict[str, Any]) -> str:
    """The one node a term names (the API server takes one value per field requirement)."""
    (requirement,) = [r for r in term.get("matchFields") or () if r["key"] == "metadata.name"]
    assert requirement["operator"] == "In"
    (name,) = requirement["values"]
    return str(name)


def test_with_narrowing_a_placed_follower_requires_its_domains_nodes_by_name() -> None:
    domains = {"r1": ("n1", "n2"), "r2": ("n3",)}
    decision = decide_mutation(pod(1), "ns", narrowing(domains, pod(0, node="n1")), REJECT)
    assert decision.pod is not None
    assert decision.pod["spec"]["nodeSelector"] == {RACK: "r1"}
    assert [name_of(term) for term in required_terms(decision.pod)] == ["n1", "n2"]


def test_without_narrowing_a_follower_gets_no_node_affinity() -> None:
    decision = decide_mutation(pod(1), "ns", lookups(pod(0, node="n1")), REJECT)
    assert decision.pod is not None
    assert required_terms(decision.pod) == []


def test_narrowing_repeats_every_node_selector_term_of_the_template_once_per_name() -> None:
    follower = pod(1)
    follower["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    domains: dict[str, tuple[str, ...]] = {"r1": ("n1", "n2")}
    decision = decide_mutation(follower, "ns", narrowing(domains, pod(0, node="n1")), REJECT)
    assert decision.pod is not None
    terms = required_terms(decision.pod)
    # (zone a or zone b) and (n1 or n2), as ORed terms
    assert [(t["matchExpressions"][0]["values"][0], name_of(t)) for t in terms] == [
        ("a", "n1"), ("a", "n2"), ("b", "n1"), ("b", "n2"),
    ]  # fmt: skip
    # the reviewed pod is left as it was
    assert "matchFields" not in follower["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]  # fmt: skip


def test_a_domain_larger_than_the_term_limit_keeps_only_the_node_selector() -> None:
    many = tuple(f"n{i}" for i in range(MAX_DOMAIN_NODE_TERMS + 1))
    decision = decide_mutation(pod(1), "ns", narrowing({"r1": many}, pod(0, node="n1")), REJECT)
    assert decision.pod is not None
    assert decision.pod["spec"]["nodeSelector"] == {RACK: "r1"}
    assert required_terms(decision.pod) == []


def test_narrowing_lists_the_domains_nodes_as_cached_at_each_admission() -> None:
    domains: dict[str, tuple[str, ...]] = {"r1": ("n1",)}
    admit = narrowing(domains, pod(0, node="n1"))
    first = decide_mutation(pod(1), "ns", admit, REJECT)
    domains["r1"] = ("n1", "n9")  # a node joined the domain
    second = decide_mutation(pod(2), "ns", admit, REJECT)
    assert first.pod is not None
    assert second.pod is not None
    assert [name_of(t) for t in required_terms(first.pod)] == ["n1"]
    assert [name_of(t) for t in required_terms(second.pod)] == ["n1", "n9"]


def test_narrowing_leaves_leaders_and_waiting_followers_without_names() -> None:
    admit = narrowing({"r1": ("n1",)}, pod(0))
    leader = decide_mutation(pod(0), "ns", admit, REJECT)
    gated = decide_mutation(pod(1), "ns", admit, GATE)
    assert leader.pod is not None
    assert gated.pod is not None
    assert required_terms(leader.pod) == []
    assert required_terms(gated.pod) == []
