"""The node names of a topology domain (the follower narrowing's lookup): what the node cache
holds at each lookup, whatever nodes joined, left or were relabelled since the last."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jobset_controller.controller.domain_nodes import DomainNodes
from jobset_controller.controller.pods import PodPlacementController, trim_node


def node(name: str, **labels: str) -> dict[str, Any]:
    return trim_node({"metadata": {"name": name, "resourceVersion": "1", "labels": labels}})


def test_names_are_the_sorted_nodes_of_one_domain_of_one_key() -> None:
    nodes = [node("b", rack="r1"), node("a", rack="r1"), node("c", rack="r2"), node("d")]
    domains = DomainNodes(lambda: nodes)
    assert domains.names("rack", "r1") == ("a", "b")
    assert domains.names("rack", "r2") == ("c",)
    assert domains.names("rack", "r9") == ()
    assert domains.names("zone", "r1") == ()


def test_a_table_is_kept_until_forgotten() -> None:
    nodes = [node("a", rack="r1")]
    domains = DomainNodes(lambda: nodes)
    assert domains.names("rack", "r1") == ("a",)
    nodes.append(node("b", rack="r1"))
    assert domains.names("rack", "r1") == ("a",)  # not read again: nothing told it
    domains.forget()
    assert domains.names("rack", "r1") == ("a", "b")


def test_the_pod_controller_forgets_on_every_node_join_leave_and_relabel() -> None:
    # No request is made: no informer runs, the test feeds the node store and its handlers.
    controller = PodPlacementController(
        object(),  # type: ignore[arg-type]
        enqueue=lambda key: None,
        recorder=object(),  # type: ignore[arg-type]
    )
    store, handlers = controller.nodes.store, controller.nodes.handlers

    def arrive(new: dict[str, Any]) -> None:
        old = store.put(new)
        if old is None:
            handlers.on_add(new)
        else:
            handlers.on_update(old, new)

    arrive(node("a", rack="r1"))
    assert controller.domain_nodes("rack", "r1") == ("a",)
    arrive(node("b", rack="r1"))  # joins
    assert controller.domain_nodes("rack", "r1") == ("a", "b")
    arrive(node("a", rack="r2"))  # relabelled into another domain
    assert controller.domain_nodes("rack", "r1") == ("b",)
    assert controller.domain_nodes("rack", "r2") == ("a",)
    gone = store.remove("b")
    assert gone is not None
    handlers.on_delete(gone)  # leaves
    assert controller.domain_nodes("rack", "r1") == ()


def test_a_table_built_while_a_node_changed_is_not_kept() -> None:
    """The webhook's thread builds, the loop's forgets: a forget that lands during a build must
    not be undone by the build storing what it read before the change."""
    nodes = [node("a", rack="r1")]
    domains: DomainNodes

    def changing() -> list[dict[str, Any]]:
        seen = list(nodes)
        nodes.append(node("b", rack="r1"))  # a node joins while the table is being built
        domains.forget()
        return seen

    builds: Iterator[Callable[[], list[dict[str, Any]]]] = iter([changing, lambda: nodes])
    domains = DomainNodes(lambda: next(builds)())
    assert domains.names("rack", "r1") == ("a",)  # this lookup's own read
    assert domains.names("rack", "r1") == ("a", "b")  # built again: the first was not kept
