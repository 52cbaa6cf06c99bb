"""The pod controller's repair/release plan as a pure function, table-driven."""
# ruff: noqa: E501  (the decision tables read best one case per line)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_GATE, PLACEMENT_LABEL
from jobset_controller.reconcile.catalogue import (
    LEADER_NODE_NOT_FOUND_EVENT,
    LEADER_NODE_WITHOUT_TOPOLOGY_EVENT,
)
from jobset_controller.reconcile.pod_placement import Release, plan_pods

RACK = "rack"
NODES: Mapping[str, Mapping[str, str]] = {"a1": {RACK: "a"}, "b1": {RACK: "b"}, "bare": {}}


def pod(
    index: int,
    *,
    node: str = "",
    selector: Mapping[str, str] | None = None,
    gates: Sequence[str] = (),
    phase: str = "Running",
    condition: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node:
        spec["nodeName"] = node
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": phase}
    if condition:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    return {
        "metadata": {
            "name": f"p{index}",
            "uid": f"u{index}",
            "resourceVersion": "7",
            "labels": {PLACEMENT_LABEL: LEADER_FOLLOWER},
            "annotations": {
                "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK,
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            "ownerReferences": [{"uid": "job", "controller": True}],
        },
        "spec": spec,
        "status": status,
    }


# case, pods, released pod names, evicted pod names, warning reason
CASES = [
    ("leader unbound: wait", [pod(0), pod(1, gates=[PLACEMENT_GATE])], [], [], None),
    ("no leader: wait", [pod(1, gates=[PLACEMENT_GATE])], [], [], None),
    ("finished leader: wait", [pod(0, node="a1", phase="Failed"), pod(1, gates=[PLACEMENT_GATE])], [], [], None),
    ("gated follower released", [pod(0, node="a1"), pod(1, gates=[PLACEMENT_GATE])], ["p1"], [], None),
    ("placed follower kept", [pod(0, node="a1"), pod(1, node="a1", selector={RACK: "a"})], [], [], None),
    ("wrong selector evicted", [pod(0, node="a1"), pod(1, selector={RACK: "b"})], [], ["p1"], None),
    ("gate removed by hand: evicted", [pod(0, node="a1"), pod(1, node="b1")], [], ["p1"], None),
    ("bound elsewhere despite selector", [pod(0, node="a1"), pod(1, node="b1", selector={RACK: "a"})], [], ["p1"], None),
    ("gated with conflicting selector", [pod(0, node="a1"), pod(1, selector={RACK: "b"}, gates=[PLACEMENT_GATE])], [], ["p1"], None),
    ("only the misplaced one", [pod(0, node="a1"), pod(1, selector={RACK: "a"}), pod(2, selector={RACK: "b"})], [], ["p2"], None),
    ("leader never evicted", [pod(0, node="b1"), pod(1, selector={RACK: "b"})], [], [], None),
    ("leader's node gone", [pod(0, node="gone"), pod(1, selector={RACK: "b"})], [], [], LEADER_NODE_NOT_FOUND_EVENT),
    ("leader's node unlabelled", [pod(0, node="bare"), pod(1, gates=[PLACEMENT_GATE])], [], [], LEADER_NODE_WITHOUT_TOPOLOGY_EVENT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "released", "evicted", "warning"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_plan(
    pods: list[dict[str, Any]], released: list[str], evicted: list[str], warning: str | None
) -> None:
    plan = plan_pods(pods, NODES.get)
    assert [r.pod for r in plan.releases] == released
    assert [e.pod for e in plan.evictions] == evicted
    assert [w.reason for w in plan.warnings] == ([warning] if warning else [])
    assert (plan.requeue_after is not None) == (warning is not None)


def test_release_keeps_other_gates_and_sets_the_leaders_domain() -> None:
    follower = pod(1, gates=["kueue.x-k8s.io/topology", PLACEMENT_GATE])
    plan = plan_pods([pod(0, node="b1"), follower], NODES.get)
    assert plan.releases == (Release("p1", "7", RACK, "b", ({"name": "kueue.x-k8s.io/topology"},)),)


def test_a_retried_eviction_does_not_set_the_condition_again() -> None:
    plan = plan_pods([pod(0, node="a1"), pod(1, selector={RACK: "b"}, condition=True)], NODES.get)
    assert [e.condition_present for e in plan.evictions] == [True]
