"""The status write: render the draft as ``.status``, and decide whether it changed.

See docs/behaviour.md#status.

Rendering starts from the stored status, so fields this controller does not manage (a newer
client's, or the in-place restart attempts) survive. ``restarts`` is always written;
``restartsCountTowardsMax``, ``terminalState``, ``conditions`` and ``replicatedJobsStatus`` are
left out when zero or empty, as Go's ``omitempty`` leaves them out. ``jobRestarts`` arrays appear
only with the RestartJob gate; ``executionAttempts`` (a pointer upstream: 0 is written) only with
the ExecutionAttemptsTracking gate; ``startTime`` is written or removed only with the
JobSetActiveDeadlineSeconds gate (without it a stored value stays as it is).

``replicatedJobsStatus`` is written in upstream's order: by name, descending (``[node, launcher]``),
not in spec order. Upstream builds the list from a map, then its equality check sorts the stored
and the new list in place, name-descending, before the new one is stored, so every status it
writes holds that order; a client reading ``replicatedJobsStatus[0]`` must see the same entry on
both controllers.

Whether to write compares the two statuses semantically: ``replicatedJobsStatus`` as a set keyed by
name (upstream's check sorts both sides first), and an omitted field equal to its zero value. So a
steady JobSet writes nothing, whatever order or spelling its stored status has; as upstream, a
stored list in another order is put in order by the next write that changes something.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names only: the draft loads the API models, which a start defers
    from jobset_controller.reconcile.draft import IndexCounts, StatusDraft

# Per-replicatedJob arrays of the RestartJob gate, with the draft field that holds each.
_JOB_RESTART_ARRAYS = (
    ("jobRestarts", "job_restarts"),
    ("jobRestartsCountTowardsMax", "job_restarts_count_towards_max"),
)


def render_status(
    old: Mapping[str, Any], draft: StatusDraft, *, job_restarts_gate: bool
) -> dict[str, Any]:
    """The complete new ``.status`` wire dict: ``old`` updated with the draft.

    ``executionAttempts`` is written when the draft holds a value (0 included: the first run);
    a draft without one leaves the stored field as it was (the gate is off, or not counted yet).
    """
    out = dict(old)
    out["restarts"] = draft.restarts
    if draft.execution_attempts is not None:
        out["executionAttempts"] = draft.execution_attempts
    if draft.track_start_time:
        _set_or_drop(out, "startTime", draft.start_time or "")
    _set_or_drop(out, "restartsCountTowardsMax", draft.restarts_count_towards_max)
    _set_or_drop(out, "terminalState", draft.terminal_state)
    _set_or_drop(out, "conditions", [dict(condition) for condition in draft.conditions])
    old_entries = _entries_by_name(old)
    entries: list[dict[str, Any]] = []
    for counts in draft.replicated_jobs:
        entry = dict(old_entries.get(counts.name, {}))
        entry.update(
            name=counts.name,
            ready=counts.ready,
            succeeded=counts.succeeded,
            failed=counts.failed,
            active=counts.active,
            suspended=counts.suspended,
        )
        for key, attribute in _JOB_RESTART_ARRAYS:
            by_name: Mapping[str, IndexCounts] = getattr(draft, attribute)
            index_counts = by_name.get(counts.name) if job_restarts_gate else None
            _set_or_drop(entry, key, index_counts.as_list() if index_counts else [])
        entries.append(entry)
    entries.sort(key=lambda entry: str(entry["name"]), reverse=True)
    _set_or_drop(out, "replicatedJobsStatus", entries)
    return out


def same_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The two statuses say the same thing (entry order and omitted zero values aside)."""
    return _normalised(old) == _normalised(new)


def _set_or_drop(target: dict[str, Any], key: str, value: object) -> None:
    if value:
        target[key] = value
    else:
        target.pop(key, None)


def _entries_by_name(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    entries = status.get("replicatedJobsStatus")
    if not isinstance(entries, list):
        return {}
    return {
        str(entry.get("name")): entry
        for entry in entries
        if isinstance(entry, Mapping) and entry.get("name")
    }


def _without_zero_values(mapping: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {
        key: value
        for key, value in mapping.items()
        if value is not None and not (key in keys and not value)
    }


def _normalised(status: Mapping[str, Any]) -> dict[str, Any]:
    out = _without_zero_values(
        status,
        ("restartsCountTowardsMax", "terminalState", "conditions", "replicatedJobsStatus"),
    )
    out["restarts"] = status.get("restarts") or 0
    entries = _entries_by_name(status)
    if entries:
        out["replicatedJobsStatus"] = sorted(
            (
                _without_zero_values(entry, ("jobRestarts", "jobRestartsCountTowardsMax"))
                for entry in entries.values()
            ),
            key=lambda entry: str(entry["name"]),
        )
    return out


# The per-replicatedJob counters whose changes alone a controller may hold back a moment
# (`controller.status_counts`): they follow the Jobs' pods from second to second. `failed` is not
# among them: a failure is news an operator (or an alert) should see in the pass that saw it.
PROGRESS_COUNTS = ("active", "ready", "succeeded", "suspended")


def differs_only_in_progress_counts(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """`new` says what `old` says except for some `PROGRESS_COUNTS` of replicatedJobs both
    statuses list (same names, same conditions, restarts, terminal state and every other field).

    False when the two are the same (there is nothing to write, held or not).
    """
    before, after = _normalised(old), _normalised(new)
    if before == after:
        return False
    return _without_progress_counts(before) == _without_progress_counts(after)


def _without_progress_counts(normalised: dict[str, Any]) -> dict[str, Any]:
    """A `_normalised` status without the progress counters of its entries."""
    entries = normalised.get("replicatedJobsStatus")
    if not entries:
        return normalised
    return {
        **normalised,
        "replicatedJobsStatus": [
            {key: value for key, value in entry.items() if key not in PROGRESS_COUNTS}
            for entry in entries
        ],
    }
