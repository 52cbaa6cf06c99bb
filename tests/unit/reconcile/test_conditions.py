"""Condition write rules, driven from the WRITE_RULES table, and the catalogue.

See docs/behaviour.md#condition-rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from jobset_controller.api import ConditionType
from jobset_controller.reconcile.catalogue import EVENT_TYPE_OF_CONDITION
from jobset_controller.reconcile.conditions import (
    WRITE_RULES,
    NewCondition,
    Relation,
    Write,
    relation,
    set_condition,
)
from jobset_controller.reconcile.counts import ReplicatedJobCounts
from jobset_controller.reconcile.draft import StatusDraft

OLD = "2025-01-01T00:00:00Z"
NOW = "2025-06-01T12:00:00Z"
TYPE = "Suspended"


def condition(status: str, reason: str = "R", message: str = "m", at: str = OLD) -> dict[str, Any]:
    return {
        "type": TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def existing_for(rel: Relation, new_status: bool) -> Mapping[str, Any] | None:
    """An existing condition standing in ``rel`` to a new one (status new_status, R, m)."""
    same = "True" if new_status else "False"
    other = "False" if new_status else "True"
    return {
        Relation.ABSENT: None,
        Relation.IDENTICAL: condition(same),
        Relation.TEXT_DIFFERS: condition(same, reason="Older"),
        Relation.STATUS_DIFFERS: condition(other),
    }[rel]


RULES = sorted(WRITE_RULES.items(), key=lambda item: (item[0][0].value, item[0][1]))


@pytest.mark.parametrize(
    ("key", "write"),
    RULES,
    ids=[f"{rel.value}, new {'True' if st else 'False'}: {w.value}" for (rel, st), w in RULES],
)
def test_write_rule(key: tuple[Relation, bool], write: Write) -> None:
    rel, new_status = key
    existing = existing_for(rel, new_status)
    new = NewCondition(TYPE, new_status, "R", "m")
    assert relation(existing, new) is rel
    before = (existing,) if existing is not None else ()
    after, changed = set_condition(before, new, NOW)
    assert changed is (write is not Write.NOTHING)
    if write is Write.NOTHING:
        assert after == before
        return
    (written,) = after
    assert written["status"] == new.status_text
    assert (written["reason"], written["message"]) == ("R", "m")
    expected_time = OLD if write is Write.REPLACE_KEEP_TIME else NOW
    assert written["lastTransitionTime"] == expected_time


def test_write_rules_cover_every_relation_and_status() -> None:
    assert set(WRITE_RULES) == {(rel, status) for rel in Relation for status in (True, False)}


def test_false_condition_is_never_appended() -> None:
    after, changed = set_condition((), NewCondition(TYPE, False, "R", "m"), NOW)
    assert (after, changed) == ((), False)


def test_replacing_keeps_the_other_conditions_and_their_order() -> None:
    others = (
        {**condition("True"), "type": "A"},
        condition("True"),
        {**condition("True"), "type": "B"},
    )
    after, changed = set_condition(others, NewCondition(TYPE, False, "X", "y"), NOW)
    assert changed
    assert [c["type"] for c in after] == ["A", TYPE, "B"]
    assert after[0] is others[0]
    assert after[2] is others[2]


def test_written_condition_has_no_observed_generation() -> None:
    after, _ = set_condition((), NewCondition(TYPE, True, "R", "m"), NOW)
    assert set(after[0]) == {"type", "status", "reason", "message", "lastTransitionTime"}


def startup(type_: str, status: str) -> dict[str, Any]:
    return {**condition(status), "type": type_}


IN_PROGRESS = ConditionType.STARTUP_POLICY_IN_PROGRESS
COMPLETED = ConditionType.STARTUP_POLICY_COMPLETED


@pytest.mark.parametrize(
    ("existing", "new_type", "expected"),
    [
        (
            [startup(IN_PROGRESS, "True")],
            COMPLETED,
            {IN_PROGRESS: ("False", OLD), COMPLETED: ("True", NOW)},
        ),
        (
            [startup(IN_PROGRESS, "False"), startup(COMPLETED, "True")],
            IN_PROGRESS,
            {IN_PROGRESS: ("True", NOW), COMPLETED: ("False", OLD)},
        ),
        (
            [startup(COMPLETED, "False")],
            IN_PROGRESS,
            {COMPLETED: ("False", OLD), IN_PROGRESS: ("True", NOW)},
        ),
    ],
    ids=[
        "completed flips a true in-progress to false keeping its time",
        "in-progress again flips completed to false",
        "a false completed is not touched",
    ],
)
def test_startup_policy_conditions_are_mutually_exclusive(
    existing: list[dict[str, Any]], new_type: str, expected: dict[str, tuple[str, str]]
) -> None:
    after, changed = set_condition(tuple(existing), NewCondition(new_type, True, "R", "m"), NOW)
    assert changed
    assert {c["type"]: (c["status"], c["lastTransitionTime"]) for c in after} == expected


def draft(conditions: tuple[Mapping[str, Any], ...] = ()) -> StatusDraft:
    return StatusDraft(
        conditions=conditions,
        restarts=0,
        restarts_count_towards_max=0,
        terminal_state="",
        replicated_jobs=(ReplicatedJobCounts("w"),),
        job_restarts={},
        job_restarts_count_towards_max={},
        now=NOW,
    )


def test_every_effective_change_queues_one_event_gated_on_the_status_write() -> None:
    new = NewCondition(ConditionType.FAILED, True, "FailedJobs", "jobset failed")
    changed = draft().with_condition(new)
    assert len(changed.events) == 1
    event = changed.events[0]
    assert (event.type, event.reason, event.note, event.after_status) == (
        "Warning",
        "FailedJobs",
        "jobset failed",
        True,
    )
    assert changed.with_condition(new).events == changed.events, "identical: no second event"


@pytest.mark.parametrize(
    ("key", "event_type"),
    sorted(EVENT_TYPE_OF_CONDITION.items()),
    ids=[f"{t} {s}" for (t, s), _ in sorted(EVENT_TYPE_OF_CONDITION.items())],
)
def test_event_type_of_each_condition(key: tuple[str, bool], event_type: str) -> None:
    condition_type, status = key
    assert NewCondition(condition_type, status, "R", "m").event_type == event_type


def test_event_type_table_matches_the_catalogue() -> None:
    warnings = {key for key, kind in EVENT_TYPE_OF_CONDITION.items() if kind == "Warning"}
    assert warnings == {("Failed", True), ("RestartingJobSet", True)}
