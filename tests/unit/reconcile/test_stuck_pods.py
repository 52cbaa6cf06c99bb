"""Pods stuck terminating on a dead node: which are force-deleted, and when.

See docs/behaviour.md#pods-on-unreachable-nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobset_controller.reconcile.stuck_pods import (
    DEAD_NODE_TAINTS,
    ForceDelete,
    dead_node_taints,
    plan_stuck_pods,
)

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
UNREACHABLE, NOT_READY = DEAD_NODE_TAINTS


def text(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str = "js-w-0-0-x",
    *,
    node: str = "dead",
    ends: datetime | None = NOW - timedelta(seconds=31),
    grace: int | None = 30,
    phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if ends is not None:
        meta["deletionTimestamp"] = text(ends)
    if grace is not None:
        meta["deletionGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def taints(dead: Sequence[str] = ("dead",), key: str = UNREACHABLE) -> Any:
    def of(node: str) -> tuple[str, ...] | None:
        if node == "gone":
            return None
        return (key,) if node in dead else ()

    return of


def test_a_pod_terminating_past_twice_its_grace_period_on_an_unreachable_node_goes() -> None:
    stuck = plan_stuck_pods([pod()], taints(), NOW, after=None)
    assert stuck.deletes == (
        ForceDelete(
            pod="js-w-0-0-x",
            uid="uid-js-w-0-0-x",
            node="dead",
            taint=UNREACHABLE,
            terminating_since=text(NOW - timedelta(seconds=61)),
            terminal=False,
        ),
    )
    assert stuck.requeue_after is None


def test_a_not_ready_node_counts_as_dead_too() -> None:
    stuck = plan_stuck_pods([pod()], taints(key=NOT_READY), NOW, after=None)
    assert [d.taint for d in stuck.deletes] == [NOT_READY]


def test_before_the_bound_the_pod_waits_and_the_pass_comes_back_at_the_bound() -> None:
    """The grace period ended 10 s ago; the bound is one more grace period (30 s): 20 s left."""
    stuck = plan_stuck_pods([pod(ends=NOW - timedelta(seconds=10))], taints(), NOW, after=None)
    assert stuck.deletes == ()
    assert stuck.requeue_after == pytest.approx(20.0)


def test_the_configured_bound_replaces_the_pods_grace_period() -> None:
    ended = pod(ends=NOW - timedelta(seconds=10))
    assert [d.pod for d in plan_stuck_pods([ended], taints(), NOW, after=5).deletes] == [
        "js-w-0-0-x"
    ]
    later = plan_stuck_pods([ended], taints(), NOW, after=120)
    assert later.deletes == ()
    assert later.requeue_after == pytest.approx(110.0)


@pytest.mark.parametrize(
    "candidate",
    [
        pytest.param(pod(ends=None), id="not-terminating"),
        pytest.param(pod(node="alive"), id="node-without-dead-taint"),
        pytest.param(pod(node="gone"), id="node-not-cached"),
        pytest.param(pod(node=""), id="never-scheduled"),
    ],
)
def test_other_pods_are_left_alone(candidate: dict[str, Any]) -> None:
    stuck = plan_stuck_pods([candidate], taints(), NOW, after=None)
    assert stuck == type(stuck)()


def test_a_terminal_pod_is_deleted_without_being_marked_failed_again() -> None:
    (delete,) = plan_stuck_pods([pod(phase="Failed")], taints(), NOW, after=None).deletes
    assert delete.terminal


def test_the_earliest_waiting_pod_sets_the_requeue() -> None:
    pods = [
        pod("a", ends=NOW - timedelta(seconds=5)),
        pod("b", ends=NOW - timedelta(seconds=25)),
        pod("c"),
    ]
    stuck = plan_stuck_pods(pods, taints(), NOW, after=None)
    assert [d.pod for d in stuck.deletes] == ["c"]
    assert stuck.requeue_after == pytest.approx(5.0)


def test_a_pod_deleted_without_grace_is_due_at_its_deletion_timestamp() -> None:
    stuck = plan_stuck_pods([pod(grace=None, ends=NOW)], taints(), NOW, after=None)
    assert [d.pod for d in stuck.deletes] == ["js-w-0-0-x"]


def test_dead_node_taints_are_read_from_a_nodes_taints_in_a_fixed_order() -> None:
    node_taints = [
        {"key": NOT_READY, "effect": "NoExecute"},
        {"key": "dedicated", "effect": "NoSchedule"},
        {"key": UNREACHABLE, "effect": "NoSchedule"},
    ]
    assert dead_node_taints(node_taints) == (UNREACHABLE, NOT_READY)
    assert dead_node_taints([]) == ()
