"""Validation errors shaped like Kubernetes field errors (apimachinery ``field.Error``).

Why this shape: the admission webhook answers with an ``Invalid`` status whose causes are field
errors, and users (and upstream's tests) read their text. Keeping the same kinds, the same field
path syntax (``spec.replicatedJobs[0].groupName``) and the same rendering
(``<field>: Invalid value: "<v>": <message>``) lets the webhook pass these through unchanged.

Where upstream reports a plain error without a path, we keep its message text but attach the path
of the field the user must change (see ``validation``); so every error here has a path.
"""

import json
from dataclasses import dataclass
from typing import Literal

ErrorType = Literal[
    "Invalid",
    "Forbidden",
    "TooLong",
    "Required",
    "Duplicate",
    "NotSupported",
    "InternalError",
]

# How apimachinery spells each kind when it renders an error.
_TYPE_TEXT: dict[ErrorType, str] = {
    "Invalid": "Invalid value",
    "Forbidden": "Forbidden",
    "TooLong": "Too long",
    "Required": "Required value",
    "Duplicate": "Duplicate value",
    "NotSupported": "Unsupported value",
    "InternalError": "Internal error",
}

# Kinds rendered without their bad value, as apimachinery does.
_VALUE_OMITTED: frozenset[ErrorType] = frozenset(
    {"Forbidden", "TooLong", "Required", "InternalError"}
)


@dataclass(frozen=True)
class FieldError:
    """One validation failure, tied to the field path the user must change.

    Attributes:
        field: Path in the object, e.g. ``spec.replicatedJobs[0].groupName``.
        type: Kind of failure, named as in apimachinery's ``field.ErrorType``.
        message: Upstream's detail text; part of the contract, tests match substrings of it.
        bad_value: The offending value (rendered only for kinds that show a value).
    """

    field: str
    type: ErrorType
    message: str
    bad_value: object | None = None

    def __str__(self) -> str:
        body = _TYPE_TEXT[self.type]
        if self.type not in _VALUE_OMITTED:
            body += f": {render_bad_value(self.bad_value)}"
        if self.message:
            body += f": {self.message}"
        return f"{self.field}: {body}" if self.field else body


def render_bad_value(value: object) -> str:
    """Render a bad value as apimachinery does for the types that occur on the wire.

    Strings are quoted, numbers and booleans are printed bare, a missing value is ``"null"`` (Go
    prints the string "null" quoted). Lists and objects, which Go prints as Go syntax, are printed
    as compact JSON instead.
    """
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
