"""What is compared between upstream's side and ours, after normalising what must differ.

A scenario's view at a checkpoint (`view`) holds, for its namespace:
- `jobset`: the JobSet's labels, annotations, finalizers, spec (as admitted: defaulted by the
  webhook and the CRD) and status (conditions as type/status/reason/message, restarts, every
  counter, replicatedJobsStatus by name, terminalState), and `statusOrder`: the order of every
  list in status as stored (condition types, replicatedJobsStatus names), which a client reading
  `replicatedJobsStatus[0]` sees; absent when the JobSet is gone;
- `jobs`: each child Job by name: labels, annotations, owner references, and spec;
- `services`, `pvcs`: each by name: labels, annotations, owner references, spec;
- for the JobSet and each child, `managers`: the (manager, operation, subresource) of every
  managedFields entry, sorted: who wrote the object and how, as a client listing managedFields
  or applying with a conflicting manager sees it;
- `events`: the distinct (type, reason, message) of the Events about JobSets in the namespace;
- `creation`: the order in which Jobs were created (see `creation_rounds`).

Normalised: uids (anywhere in a string, and the uid-valued labels) become `<uid>`; the random
five-character suffix of a pod name becomes `<pod>`; resourceVersions, timestamps, the fields
managedFields lists (its managers and operations are kept), generation, the Service's allocated
cluster IPs and a claim's bound volume name are left out. The namespaces and JobSet names are the
same on both sides, so names need no mapping.

`differences(upstream, ours)` walks both views and returns one `Difference` per path where they
disagree (a missing key is `ABSENT`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.differential.cache import Added, Cache

ABSENT = "<absent>"
UID = "<uid>"
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# <jobset>-<rjob>-<jobIndex>-<completionIndex>-<5 random>: an Indexed Job's pod.
_POD = re.compile(r"\b([a-z0-9]([-a-z0-9]*[a-z0-9])?-\d+-\d+)-[a-z0-9]{5}\b")
_UID_KEYS = frozenset(
    {
        "jobset.sigs.k8s.io/jobset-uid",
        "controller-uid",
        "batch.kubernetes.io/controller-uid",
    }
)
_META_DROPPED = frozenset(
    {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"}
)
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
# Two Job creations this far apart (s) or more are in different rounds (`creation_rounds`).
ROUND_GAP = 1.0


@dataclass(frozen=True)
class Difference:
    path: str
    upstream: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.path}: upstream {self.upstream!r} | ours {self.ours!r}"


def scrub(value: Any) -> Any:
    """uids and pod suffixes replaced in every string of `value`; uid-valued keys blanked; empty
    maps and lists dropped from maps (Go's encoding of a defaulted object writes empty structs,
    `metadata: {}`, `resources: {}`, where a field was absent: the same value to the API)."""
    if isinstance(value, str):
        return _POD.sub(r"\1-<pod>", _UID.sub(UID, value))
    if isinstance(value, Mapping):
        return {
            k: (UID if k in _UID_KEYS else scrub(v))
            for k, v in value.items()
            if v != {} and v != []
        }
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    kept = {
        k: meta[k]
        for k in ("labels", "annotations", "finalizers", "ownerReferences")
        if meta.get(k)
    }
    if "deletionTimestamp" in meta:
        kept["deleting"] = True
    kept["managers"] = sorted(
        {
            (m.get("manager", ""), m.get("operation", ""), m.get("subresource", ""))
            for m in meta.get("managedFields") or ()
        }
    )
    return kept


def jobset_view(js: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if js is None:
        return None
    status = dict(js.get("status") or {})
    listed = status.pop("conditions", None) or ()
    conditions = {c["type"]: {k: c.get(k) for k in ("status", "reason", "message")} for c in listed}
    entries = status.pop("replicatedJobsStatus", None) or ()
    replicated = {r["name"]: r for r in entries}
    return {
        "metadata": _meta(js),
        "spec": js.get("spec"),
        "status": {**status, "conditions": conditions, "replicatedJobsStatus": replicated},
        "statusOrder": {
            "conditions": [c["type"] for c in listed],
            "replicatedJobsStatus": [r["name"] for r in entries],
        },
    }


def _child(obj: Mapping[str, Any], drop_spec: Iterable[str] = ()) -> dict[str, Any]:
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k not in set(drop_spec)}
    return {"metadata": _meta(obj), "spec": spec}


def creation_rounds(added: Sequence[Added], ordered: bool) -> list[list[str]]:
    """The creation order of one JobSet's Jobs, as rounds of sorted Job names ("<name>@<attempt>").

    Both controllers create the Jobs of one pass in parallel, so the order inside a pass is not
    defined. A round is a burst of creations less than ROUND_GAP apart; a JobSet whose Jobs wait
    on each other (startupPolicy InOrder, dependsOn) has rounds separated by at least the time
    its pods take to become ready or complete (seconds, by the scenarios' pod timings). Those
    scenarios are chains, one replicated job per step, so a round also ends only where the
    replicated job (or the attempt) changes: on a loaded machine the two Jobs of one replicated
    job, created in one pass, were once seen more than ROUND_GAP apart (in-order, make test run
    11), which is no difference in order. A controller that did not wait still shows: its next
    replicated job lands in the same burst. For any other JobSet only the restart attempts are
    ordered: one round per attempt (`ordered` False).
    """
    rounds: list[list[str]] = []
    last = -1e9
    step: tuple[str, str] | None = None
    for item in added:
        attempt = item.labels.get(RESTART_ATTEMPT, "?")
        this = (item.labels.get(REPLICATED_JOB_NAME, "?"), attempt)
        if ordered:
            fresh = not rounds or (item.seen - last >= ROUND_GAP and this != step)
        else:
            fresh = not rounds or not rounds[-1][-1].endswith(f"@{attempt}")
        if fresh:
            rounds.append([])
        rounds[-1].append(f"{item.name}@{attempt}")
        last, step = item.seen, this
    return [sorted(r) for r in rounds]


def view(cache: Cache, namespace: str, jobset: str, *, ordered: bool) -> dict[str, Any]:
    """The comparable state of `namespace` (call under the cache's lock)."""
    jobs = {j["metadata"]["name"]: _child(j) for j in cache.items("jobs", namespace)}
    services = {
        s["metadata"]["name"]: _child(s, ("clusterIP", "clusterIPs", "ipFamilies",
                                          "ipFamilyPolicy", "internalTrafficPolicy"))
        for s in cache.items("services", namespace)
    }  # fmt: skip
    pvcs = {
        p["metadata"]["name"]: _child(p, ("volumeName",)) for p in cache.items("pvcs", namespace)
    }
    events = sorted(
        {
            (e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in cache.items("events", namespace)
        }
    )
    added = [
        a for a in cache.added if a.namespace == namespace and a.labels.get(JOBSET_NAME) == jobset
    ]
    scrubbed: dict[str, Any] = scrub(
        {
            "jobset": jobset_view(cache.get("jobsets", namespace, jobset)),
            "jobs": jobs,
            "services": services,
            "pvcs": pvcs,
            "events": [list(e) for e in events],
            "creation": creation_rounds(added, ordered),
        }
    )
    return scrubbed


def differences(upstream: Any, ours: Any, path: str = "") -> list[Difference]:
    """Every path where the two values disagree. Mappings are walked key by key; lists of equal
    length item by item; anything else is compared whole."""
    if isinstance(upstream, Mapping) and isinstance(ours, Mapping):
        found: list[Difference] = []
        for key in sorted(set(upstream) | set(ours), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in upstream:
                found.append(Difference(sub, ABSENT, ours[key]))
            elif key not in ours:
                found.append(Difference(sub, upstream[key], ABSENT))
            else:
                found.extend(differences(upstream[key], ours[key], sub))
        return found
    if (
        isinstance(upstream, list)
        and isinstance(ours, list)
        and len(upstream) == len(ours)
        and path.rsplit(".", 1)[-1] not in ("events", "creation")
    ):
        found = []
        for index, (a, b) in enumerate(zip(upstream, ours, strict=True)):
            found.extend(differences(a, b, f"{path}[{index}]"))
        return found
    if path.rsplit(".", 1)[-1] == "events" and isinstance(upstream, list):
        # One difference per event only one side emitted.
        up = {tuple(e) for e in upstream}
        our = {tuple(e) for e in ours}
        return [Difference(f"{path}{list(e)}", "emitted", ABSENT) for e in sorted(up - our)] + [
            Difference(f"{path}{list(e)}", ABSENT, "emitted") for e in sorted(our - up)
        ]
    return [] if upstream == ours else [Difference(path, upstream, ours)]
