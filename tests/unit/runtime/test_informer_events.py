"""How watch events change the informer's store and which handler calls they make."""

from __future__ import annotations

from typing import Any

from jobset_controller.runtime.informer import Handlers, Informer
from jobset_controller.runtime.resources import Resource

SERVICES = Resource("", "v1", "services")


def service(rv: str, owned: bool) -> dict[str, Any]:
    refs = [{"kind": "JobSet", "name": "js", "controller": True}] if owned else []
    return {
        "metadata": {
            "name": "svc",
            "namespace": "ns",
            "resourceVersion": rv,
            "ownerReferences": refs,
        }
    }


def informer(calls: list[tuple[str, Any]]) -> Informer:
    return Informer(
        object(),  # type: ignore[arg-type]  # events are applied directly; nothing is listed
        SERVICES,
        keep=lambda obj: bool(obj["metadata"]["ownerReferences"]),
        handlers=Handlers(
            on_add=lambda o: calls.append(("add", o)),
            on_update=lambda old, new: calls.append(("update", new)),
            on_delete=lambda o: calls.append(("delete", o)),
        ),
    )


def test_an_object_that_stops_matching_is_deleted_with_its_last_kept_state() -> None:
    calls: list[tuple[str, Any]] = []
    inf = informer(calls)
    inf._apply({"type": "ADDED", "object": service("1", owned=True)})
    inf._apply({"type": "MODIFIED", "object": service("2", owned=False)})
    assert inf.store.get("ns/svc") is None
    kind, obj = calls[-1]
    assert kind == "delete"
    assert obj["metadata"]["resourceVersion"] == "1", "handlers need the owner it still had"
    assert inf.resource_version == "2"


def test_objects_that_never_matched_make_no_calls() -> None:
    calls: list[tuple[str, Any]] = []
    inf = informer(calls)
    inf._apply({"type": "ADDED", "object": service("1", owned=False)})
    inf._apply({"type": "DELETED", "object": service("2", owned=False)})
    assert calls == []
    assert len(inf.store) == 0


def test_bookmarks_only_move_the_resource_version() -> None:
    calls: list[tuple[str, Any]] = []
    inf = informer(calls)
    inf._apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}})
    assert inf.resource_version == "42"
    assert calls == []
