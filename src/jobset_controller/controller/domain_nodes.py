"""Node names per topology domain, read from the pod controller's node cache.

For the opt-in follower narrowing (Configuration `exclusivePlacement.followerNodeAffinity`): the
mutating webhook lists a follower's domain's nodes by name so that kube-scheduler looks at those
nodes only. docs/behaviour.md#exclusive-placement.

Guarantee: `names(key, value)` is the sorted names of the nodes whose label `key` is `value`, as
the node cache holds them when it is called. The table of one topology key is built on its first
lookup (one pass over the cache) and dropped whenever a node is added, deleted or relabelled:
between node changes a lookup is a dict read, after one a single pass. Why lazy and per key: a
cluster has one or two topology keys in use, nodes change rarely against pod admissions, and an
index of every label of every node would cost memory at 5,000 nodes for keys nobody asks about.

Threads: `names` is called on the webhook server's thread, `forget` on the loop's (node events).
A table built while a node changed is used for that one lookup but not kept (a generation count,
compared and stored under a lock), so a forget is never undone by a build that began before it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Node = Mapping[str, Any]


class DomainNodes:
    def __init__(self, nodes: Callable[[], Iterable[Node]]) -> None:
        """`nodes`: the cached nodes at the time of the call (the informer's store)."""
        self._nodes = nodes
        self._by_key: dict[str, dict[str, tuple[str, ...]]] = {}
        self._generation = 0  # node changes seen
        self._lock = threading.Lock()

    def names(self, key: str, value: str) -> tuple[str, ...]:
        table = self._by_key.get(key)
        if table is None:
            began = self._generation
            table = self._build(key)  # outside the lock: a pass over every node
            with self._lock:
                if began == self._generation:
                    self._by_key[key] = table
        return table.get(value, ())

    def forget(self) -> None:
        """A node was added, deleted or relabelled: every table is rebuilt on its next use."""
        with self._lock:
            self._generation += 1
            self._by_key.clear()

    def _build(self, key: str) -> dict[str, tuple[str, ...]]:
        grouped: dict[str, list[str]] = {}
        for node in self._nodes():
            meta = node.get("metadata") or {}
            value = (meta.get("labels") or {}).get(key)
            if value is not None:
                grouped.setdefault(value, []).append(str(meta.get("name") or ""))
        return {value: tuple(sorted(names)) for value, names in grouped.items()}
