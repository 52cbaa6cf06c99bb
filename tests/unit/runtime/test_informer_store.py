"""The informer's Store in compact mode: same answers as the plain store, a fresh dict per read."""

from __future__ import annotations

from typing import Any

import pytest

from jobset_controller.runtime.informer import Store, index_by_namespace


def obj(name: str, namespace: str = "ns", rv: str = "1", owner: str = "") -> dict[str, Any]:
    labels = {"owner": owner} if owner else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "labels": labels}
    }


def by_owner(item: dict[str, Any]) -> list[str]:
    owner = item["metadata"]["labels"].get("owner")
    return [owner] if owner else []


@pytest.mark.parametrize("compact", [False, True])
def test_compact_and_plain_stores_answer_alike(compact: bool) -> None:
    store = Store({"namespace": index_by_namespace, "owner": by_owner}, compact=compact)
    assert store.put(obj("a", owner="x")) is None
    assert store.put(obj("b", owner="x")) is None
    assert store.put(obj("c", namespace="other")) is None

    old = store.put(obj("a", rv="2", owner="y"))

    assert old == obj("a", owner="x")
    assert store.get("ns/a") == obj("a", rv="2", owner="y")
    assert [o["metadata"]["name"] for o in store.by_index("owner", "x")] == ["b"]
    assert [o["metadata"]["name"] for o in store.by_index("owner", "y")] == ["a"]
    assert [o["metadata"]["name"] for o in store.by_index("namespace", "ns")] == ["a", "b"]
    assert store.remove("ns/b") == obj("b", owner="x")
    assert store.by_index("owner", "x") == []
    assert sorted(o["metadata"]["name"] for o in store) == ["a", "c"]
    assert len(store) == 2
    assert store.remove("ns/missing") is None


def test_compact_store_reads_are_fresh_copies() -> None:
    store = Store(compact=True)
    original = obj("a")
    store.put(original)
    original["metadata"]["name"] = "changed after put"

    first = store.get("ns/a")
    assert first is not None
    first["metadata"]["labels"]["mutated"] = "by a reader"

    assert store.get("ns/a") == obj("a")
