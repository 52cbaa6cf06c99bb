"""How a condition is written into ``status.conditions``, as a table.

See docs/behaviour.md#condition-rules.

Setting a condition compares it with the one of the same type already there and looks the
relation up in ``WRITE_RULES``:

==================  =================================  =====================================
existing condition  new status True                    new status False
==================  =================================  =====================================
absent              append (lastTransitionTime = now)  nothing: a False condition never
                                                       appears without a True one before it
identical           nothing (no event)                 nothing (no event)
other reason/msg    replace, keep lastTransitionTime   replace, keep lastTransitionTime
other status        replace, lastTransitionTime = now  replace, lastTransitionTime = now
==================  =================================  =====================================

Plus one rule across types (``EXCLUSIVE_WITH``): setting StartupPolicyInProgress or
StartupPolicyCompleted to True flips an existing True condition of the other type to False,
changing only its status. ``observedGeneration`` is never set. A change of any kind is reported,
so the caller can queue the condition's event (emitted after the status write).
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from jobset_controller.api import ConditionType
from jobset_controller.reconcile.catalogue import EVENT_TYPE_OF_CONDITION, WARNING, EventType

Conditions = tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class NewCondition:
    """A condition to set: type, status, reason, message (the time comes from the pass)."""

    type: str
    status: bool
    reason: str
    message: str

    @property
    def status_text(self) -> str:
        """The wire value of the status."""
        return "True" if self.status else "False"

    @property
    def event_type(self) -> EventType:
        """Normal or Warning, from the catalogue (docs/behaviour.md#condition-catalogue)."""
        return EVENT_TYPE_OF_CONDITION.get((self.type, self.status), WARNING)


class Relation(enum.Enum):
    """How the existing condition of the same type relates to the new one."""

    ABSENT = "absent"
    IDENTICAL = "identical"
    TEXT_DIFFERS = "reason or message differs"
    STATUS_DIFFERS = "status differs"


class Write(enum.Enum):
    """What happens to ``status.conditions``."""

    NOTHING = "nothing"
    APPEND = "append, lastTransitionTime now"
    REPLACE_KEEP_TIME = "replace, keep lastTransitionTime"
    REPLACE_NEW_TIME = "replace, lastTransitionTime now"


# (relation, new status is True) -> write (docs/behaviour.md#condition-rules).
WRITE_RULES: Final[Mapping[tuple[Relation, bool], Write]] = MappingProxyType(
    {
        (Relation.ABSENT, True): Write.APPEND,
        (Relation.ABSENT, False): Write.NOTHING,
        (Relation.IDENTICAL, True): Write.NOTHING,
        (Relation.IDENTICAL, False): Write.NOTHING,
        (Relation.TEXT_DIFFERS, True): Write.REPLACE_KEEP_TIME,
        (Relation.TEXT_DIFFERS, False): Write.REPLACE_KEEP_TIME,
        (Relation.STATUS_DIFFERS, True): Write.REPLACE_NEW_TIME,
        (Relation.STATUS_DIFFERS, False): Write.REPLACE_NEW_TIME,
    }
)

# Setting one of these True flips a True condition of the other type to False.
EXCLUSIVE_WITH: Final[Mapping[str, str]] = MappingProxyType(
    {
        ConditionType.STARTUP_POLICY_IN_PROGRESS: ConditionType.STARTUP_POLICY_COMPLETED,
        ConditionType.STARTUP_POLICY_COMPLETED: ConditionType.STARTUP_POLICY_IN_PROGRESS,
    }
)


def relation(existing: Mapping[str, Any] | None, new: NewCondition) -> Relation:
    """How ``existing`` (same type, or None) relates to ``new``."""
    if existing is None:
        return Relation.ABSENT
    if existing.get("status") != new.status_text:
        return Relation.STATUS_DIFFERS
    if existing.get("reason") != new.reason or existing.get("message") != new.message:
        return Relation.TEXT_DIFFERS
    return Relation.IDENTICAL


def set_condition(conditions: Conditions, new: NewCondition, now: str) -> tuple[Conditions, bool]:
    """``conditions`` with ``new`` written by the rules above, and whether anything changed.

    Args:
        conditions: The current conditions (wire dicts), in order; never modified.
        new: The condition to set.
        now: The pass's time, already formatted (``timestamps.format_time``).
    """
    out: list[Mapping[str, Any]] = []
    changed = False
    found = False
    exclusive = EXCLUSIVE_WITH.get(new.type) if new.status else None
    for existing in conditions:
        if existing.get("type") == new.type:
            found = True
            write = WRITE_RULES[(relation(existing, new), new.status)]
            replacement = _written(existing, new, write, now)
            changed = changed or replacement is not existing
            out.append(replacement)
        elif existing.get("type") == exclusive and existing.get("status") == "True":
            out.append({**existing, "status": "False"})
            changed = True
        else:
            out.append(existing)
    if not found and WRITE_RULES[(Relation.ABSENT, new.status)] is Write.APPEND:
        out.append(_wire(new, now))
        changed = True
    return (tuple(out), True) if changed else (conditions, False)


def find_condition(conditions: Conditions, condition_type: str) -> Mapping[str, Any] | None:
    """The first condition of that type, or None."""
    for condition in conditions:
        if condition.get("type") == condition_type:
            return condition
    return None


def is_true(conditions: Conditions, condition_type: str) -> bool:
    """A condition of that type exists with status True."""
    condition = find_condition(conditions, condition_type)
    return condition is not None and condition.get("status") == "True"


def _written(
    existing: Mapping[str, Any], new: NewCondition, write: Write, now: str
) -> Mapping[str, Any]:
    if write is Write.REPLACE_NEW_TIME:
        return _wire(new, now)
    if write is Write.REPLACE_KEEP_TIME:
        return _wire(new, str(existing.get("lastTransitionTime") or now))
    return existing


def _wire(new: NewCondition, last_transition_time: str) -> dict[str, Any]:
    return {
        "type": str(new.type),
        "status": new.status_text,
        "lastTransitionTime": last_transition_time,
        "reason": new.reason,
        "message": new.message,
    }
