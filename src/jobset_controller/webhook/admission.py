"""AdmissionReview (admission.k8s.io/v1) handling for JobSets, without I/O.

- Mutating (`/mutate-jobset-x-k8s-io-v1alpha2-jobset`, CREATE only, like upstream): the JobSet is
  defaulted with `default_jobset`; the answer is one JSON Patch op that sets the defaulted
  `spec` (`add` replaces an existing member), or no patch when nothing changed.
- Validating (`/validate-jobset-x-k8s-io-v1alpha2-jobset`, CREATE and UPDATE): `validate_create`
  or `validate_update`. A denial is a 422 `Invalid` Status for `jobset.x-k8s.io/JobSet` whose
  message and causes carry every error with its field path, as the apiserver renders field
  errors, so `kubectl` shows `admission webhook "vjobset.kb.io" denied the request: ...`.
- The mutating step is never stricter than the CRD: an object it cannot read as a JobSet (a
  value the schema forbids, such as negative `replicas`, an unknown `dependsOn.status`, more than
  50 `volumeClaimPolicies`, or something that is not a JobSet at all) is allowed unchanged. Why:
  the API server's schema validation runs after the mutating webhooks and answers such an object
  with its own 422 and the schema's message, as it does upstream; refusing it here would replace
  that message with ours and a different status code.
- The validating step runs after the schema, so what reaches it parses; anything that still cannot
  be read is denied with 400 and the reason, never answered with an exception.
- A body that is not an AdmissionReview at all never gets here: the server answers it with an
  HTTP 400 first (`review.malformed`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from jobset_controller.api import (
    GROUP,
    KIND,
    FeatureGates,
    FieldError,
    JobSet,
    default_jobset,
    validate_create,
    validate_update,
)
from jobset_controller.webhook.review import Review, request_of, response

PvcLookup = Callable[[JobSet], Mapping[str, Mapping[str, Any]]]

_CAUSE_REASON = {
    "Invalid": "FieldValueInvalid",
    "Forbidden": "FieldValueForbidden",
    "TooLong": "FieldValueTooLong",
    "Required": "FieldValueRequired",
    "Duplicate": "FieldValueDuplicate",
    "NotSupported": "FieldValueNotSupported",
    "InternalError": "InternalError",
}


def _denied(review: Review, code: int, message: str, **status: Any) -> dict[str, Any]:
    return response(
        review,
        allowed=False,
        status={"status": "Failure", "code": code, "message": message, **status},
    )


def invalid_status(name: str, errors: Sequence[FieldError]) -> dict[str, Any]:
    """The Status the apiserver would build for these field errors (StatusReasonInvalid): one
    cause per error; the message names each distinct error once (apimachinery's aggregate
    drops repeated texts), in brackets when more than one remains."""
    rendered = [str(error) for error in errors]
    distinct = list(dict.fromkeys(rendered))
    joined = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    return {
        "code": 422,
        "reason": "Invalid",
        "message": f'{KIND}.{GROUP} "{name}" is invalid: {joined}',
        "details": {
            "name": name,
            "group": GROUP,
            "kind": KIND,
            "causes": [
                {
                    "reason": _CAUSE_REASON.get(error.type, "FieldValueInvalid"),
                    "message": text.split(": ", 1)[1] if ": " in text else text,
                    "field": error.field,
                }
                for error, text in zip(errors, rendered, strict=True)
            ],
        },
    }


def _jobset(obj: Any) -> JobSet:
    if not isinstance(obj, Mapping) or obj.get("kind") != KIND:
        raise ValueError("expected a JobSet object")
    return JobSet.model_validate(obj)


def mutate(review: Review) -> dict[str, Any]:
    """Default a JobSet on CREATE (upstream's mutating webhook never runs on UPDATE).

    What cannot be read or defaulted is let through as it came (module docstring): the schema
    check that follows rejects it with the API server's own message.
    """
    request = request_of(review)
    if request.get("operation") != "CREATE":
        return response(review, allowed=True)
    try:
        js = _jobset(request.get("object"))
        before = js.to_dict().get("spec")
        after = default_jobset(js).to_dict().get("spec")
    except (ValueError, TypeError, RecursionError):  # pydantic's ValidationError is a ValueError
        return response(review, allowed=True)
    if after == before:
        return response(review, allowed=True)
    patch = [{"op": "add", "path": "/spec", "value": after}]
    return response(
        review,
        allowed=True,
        patchType="JSONPatch",
        patch=base64.b64encode(orjson.dumps(patch)).decode(),
    )


def validate(
    review: Review, *, features: FeatureGates, existing_pvcs: PvcLookup | None = None
) -> dict[str, Any]:
    """Validate a JobSet on CREATE or UPDATE; other operations are allowed."""
    request = request_of(review)
    operation = request.get("operation")
    try:
        if operation == "CREATE":
            js = _jobset(request.get("object"))
            pvcs = existing_pvcs(js) if existing_pvcs is not None else None
            errors = validate_create(js, features=features, existing_pvcs=pvcs)
        elif operation == "UPDATE":
            js = _jobset(request.get("object"))
            old = _jobset(request.get("oldObject"))
            errors = validate_update(old, js, features=features)
        else:
            return response(review, allowed=True)
    except (ValueError, ValidationError) as error:
        return _denied(review, 400, f"cannot read the JobSet: {error}")
    if not errors:
        return response(review, allowed=True)
    name = js.metadata.name or js.metadata.generate_name or ""
    status = invalid_status(name, errors)
    return _denied(
        review, status["code"], status["message"], reason="Invalid", details=status["details"]
    )
