"""The informer's Store in compact mode: same answers as the plain store, a fresh dict per read."""

from __future__ import annotations

import zlib
from typing import Any

import orjson
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


@pytest.mark.parametrize("compact", [False, True])
def test_an_index_value_moving_between_one_and_many_keys_answers_every_step(
    compact: bool,
) -> None:
    store = Store({"owner": by_owner}, compact=compact)

    def owned(value: str) -> list[str]:
        return [o["metadata"]["name"] for o in store.by_index("owner", value)]

    store.put(obj("a", owner="x"))
    assert owned("x") == ["a"]
    store.put(obj("a", rv="2", owner="x"))  # the same key again: still one
    assert owned("x") == ["a"]
    store.put(obj("b", owner="x"))
    store.put(obj("c", owner="x"))
    assert owned("x") == ["a", "b", "c"]
    store.remove("ns/b")
    store.remove("ns/a")
    assert owned("x") == ["c"]
    store.put(obj("c", rv="2", owner="y"))
    assert owned("x") == []
    assert owned("y") == ["c"]
    store.remove("ns/c")
    assert owned("y") == []


def test_compact_store_keeps_objects_like_the_first_in_a_fraction_of_their_deflated_size() -> None:
    """The first object primes the deflate dictionary; its siblings cost a fraction of what
    deflate alone makes of them, and an object unlike it still reads back whole."""
    store = Store(compact=True)

    def sibling(i: int) -> dict[str, Any]:
        item = obj(f"train-workers-{i}", rv=str(1000 + i), owner="train")
        item["spec"] = {"image": "registry.example/trainer:v1", "args": ["--epochs=10"] * 5}
        return item

    for i in range(20):
        store.put(sibling(i))
    stranger = {"metadata": {"name": "z", "namespace": "q"}, "data": list(range(50))}
    store.put(stranger)

    kept = store._items["ns/train-workers-7"]
    alone = zlib.compress(orjson.dumps(sibling(7)), 1)
    assert len(kept) * 2 < len(alone), (len(kept), len(alone))
    assert store.get("ns/train-workers-7") == sibling(7)
    assert store.get("q/z") == stranger


@pytest.mark.parametrize("compact", [False, True])
def test_by_index_leaves_out_an_object_removed_after_the_index_named_it(compact: bool) -> None:
    """The webhook server reads the pod cache from its own thread while the loop's thread
    removes pods: `remove` drops the object before its index entries, so a read between the
    two finds a key without an object. It is gone: left out, not a KeyError."""
    for held in (["a"], ["a", "b"]):  # one key is kept as a string, more as a set
        store = Store({"owner": by_owner}, compact=compact)
        for name in held:
            store.put(obj(name, owner="o"))
        store._items.pop("ns/a")  # the interleaving: the object gone, its index entry not yet
        assert [item["metadata"]["name"] for item in store.by_index("owner", "o")] == held[1:]
