"""The AdmissionReview envelope (admission.k8s.io/v1) both webhooks read and answer.

Why a module of its own: the JobSet and the pod webhooks answer in the same envelope and must
refuse the same malformed input in the same way; the answer was built by two verbatim copies,
which drift.

`malformed(body)` is the server's gate: the API server always sends a well-formed review, so
anything else (a body that is not an object, a `request` that is not one, an `object` or
`oldObject` that is neither null nor an object, metadata or spec that is not an object, a `uid`,
`operation`, `namespace` or `name` that is not a string) comes from another client, and gets a
400 that says what is wrong instead of reaching a decision that reads it as a dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"

Review = Mapping[str, Any]

_STRINGS: Final = ("uid", "operation", "namespace", "name")
_OBJECTS: Final = ("object", "oldObject")
_OBJECT_PARTS: Final = ("metadata", "spec")
_METADATA_MAPS: Final = ("labels", "annotations")


def malformed(body: Any) -> str | None:
    """What makes `body` no AdmissionReview this server can read, or None when it is one."""
    if not isinstance(body, Mapping):
        return f"expected an AdmissionReview object, got {_kind(body)}"
    request = body.get("request")
    if not isinstance(request, Mapping):
        return f"expected an AdmissionReview with a request object, got {_kind(request)}"
    for key in _STRINGS:
        value = request.get(key)
        if value is not None and not isinstance(value, str):
            return f"request.{key} must be a string, got {_kind(value)}"
    for key in _OBJECTS:
        problem = _object_problem(request.get(key), f"request.{key}")
        if problem is not None:
            return problem
    return None


def request_of(review: Review) -> Mapping[str, Any]:
    """The review's `request` (an empty one when absent: the caller checked `malformed`)."""
    request = review.get("request")
    return request if isinstance(request, Mapping) else {}


def response(review: Review, **fields: Any) -> dict[str, Any]:
    """The answering AdmissionReview: `fields` in a response carrying the request's uid."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": {"uid": request_of(review).get("uid") or "", **fields},
    }


def _object_problem(obj: Any, where: str) -> str | None:
    if obj is None:
        return None  # DELETE has no object, CREATE no oldObject
    if not isinstance(obj, Mapping):
        return f"{where} must be an object, got {_kind(obj)}"
    for part in _OBJECT_PARTS:
        value = obj.get(part)
        if value is not None and not isinstance(value, Mapping):
            return f"{where}.{part} must be an object, got {_kind(value)}"
    metadata = obj.get("metadata") or {}
    for key in _METADATA_MAPS:
        value = metadata.get(key)
        if value is not None and not isinstance(value, Mapping):
            return f"{where}.metadata.{key} must be an object, got {_kind(value)}"
    return None


def _kind(value: Any) -> str:
    """A JSON type name for messages (never the value: it may be large or sensitive)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
