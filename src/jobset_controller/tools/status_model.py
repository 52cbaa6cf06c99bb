"""A JobSet and everything ``status`` shows about it, as raw API objects, plus small readers.

Why raw dicts: ``status`` shows what the API server holds, including fields our models would
reject or drop (a JobSet another controller wrote, a pod of a newer Kubernetes). Every reader
tolerates a missing field. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class JobSetState:
    """One JobSet, its Jobs (controller-owned), their pods, the events about any of them.

    ``events`` are ``events.k8s.io/v1`` Events, oldest first; ``now`` is when it was read.
    ``pod_groups``: gang scheduling (KEP-969), the PodGroups the JobSet controls;
    ``scheduling_api`` False when the JobSet sets ``spec.scheduling`` and the API server does
    not serve scheduling.k8s.io/v1beta1.
    """

    jobset: Obj
    jobs: tuple[Obj, ...]
    pods: tuple[Obj, ...]
    events: tuple[Obj, ...]
    now: datetime
    pod_groups: tuple[Obj, ...] = ()
    scheduling_api: bool = True


def section(obj: Obj | None, key: str) -> Obj:
    value = (obj or {}).get(key)
    return value if isinstance(value, Mapping) else {}


def items(obj: Obj | None, key: str) -> Sequence[Obj]:
    value = (obj or {}).get(key)
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def name(obj: Obj) -> str:
    return str(section(obj, "metadata").get("name") or "")


def uid(obj: Obj) -> str:
    return str(section(obj, "metadata").get("uid") or "")


def labels_of(obj: Obj) -> Mapping[str, str]:
    return section(section(obj, "metadata"), "labels")


def annotations_of(obj: Obj) -> Mapping[str, str]:
    return section(section(obj, "metadata"), "annotations")


def count(obj: Obj, key: str) -> int:
    value = section(obj, "status").get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def condition(obj: Obj, kind: str) -> Obj | None:
    """The condition of that type, whatever its status."""
    for entry in items(section(obj, "status"), "conditions"):
        if entry.get("type") == kind:
            return entry
    return None


def is_true(obj: Obj, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def controller_uid(obj: Obj) -> str:
    """The UID of the object's controller owner ("" when it has none)."""
    for reference in items(section(obj, "metadata"), "ownerReferences"):
        if reference.get("controller") is True:
            return str(reference.get("uid") or "")
    return ""


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (``Z`` or an offset, micros optional)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def event_time(event: Obj) -> datetime | None:
    """When an Event last happened: its series' last observation, else its own time."""
    for value in (
        section(event, "series").get("lastObservedTime"),
        event.get("deprecatedLastTimestamp"),
        event.get("eventTime"),
        event.get("deprecatedFirstTimestamp"),
        section(event, "metadata").get("creationTimestamp"),
    ):
        parsed = parse_time(value)
        if parsed is not None:
            return parsed
    return None


def age(then: datetime | None, now: datetime) -> str:
    """kubectl's short age: ``45s``, ``3m``, ``5h``, ``2d``; ``?`` when unknown."""
    if then is None:
        return "?"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
