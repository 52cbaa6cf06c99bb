"""The CRD's own CEL rules, checked in Python so the SDK catches them without an API server.

Why separate from ``validation``: these rules live in the CustomResourceDefinition and the API
server enforces them *before* any webhook runs (a request they reject never reaches the validating
webhook). The webhook checks are ours to implement; these are a courtesy copy. Keeping them apart
lets the webhook skip them and keeps each module's message sources obvious.

Rules (docs/behaviour.md#spec), with the API server's rendering of the bad value (``"object"`` or
``"array"``, the CEL type name):

* on ``spec``: startupPolicy InOrder and any dependsOn are mutually exclusive (with InOrder and
  no ``replicatedJobs`` key at all, evaluating the rule fails: "no such key");
* the list-map keys (schema, not CEL, but also enforced before any webhook): replicatedJobs and
  each replicatedJob's dependsOn are ``x-kubernetes-list-type: map`` keyed by ``name``, so a
  repeated name is a ``Duplicate value`` at the repeating item;
* on each volumeClaimPolicy: templates must not set ``metadata.namespace``;
* transition rules ``self == oldSelf`` on network, successPolicy, failurePolicy, startupPolicy,
  volumeClaimPolicies and each replicatedJob's dependsOn (matched by name, the list-map key).
  Kubernetes evaluates a transition rule only when the field exists in both old and new objects,
  so adding a field that was absent is allowed.

Transition rules compare the objects as the API server sees them: CRD structural defaults applied
(it applies them to every request) and nulls dropped (it prunes them).
"""

from typing import Any, Final

from jobset_controller.api.constants import StartupPolicyOrder
from jobset_controller.api.defaults import apply_crd_defaults
from jobset_controller.api.field_errors import FieldError
from jobset_controller.api.types import JobSet

MUTUALLY_EXCLUSIVE_MESSAGE: Final = "StartupPolicy and DependsOn APIs are mutually exclusive"
TEMPLATE_NAMESPACE_MESSAGE: Final = "namespace cannot be set for VolumeClaimPolicies templates"
IMMUTABLE_MESSAGE: Final = "Value is immutable"

# Spec fields frozen by `self == oldSelf`, with the CEL type name the API server prints.
_IMMUTABLE_SPEC_FIELDS: Final = (
    ("network", "object"),
    ("successPolicy", "object"),
    ("failurePolicy", "object"),
    ("startupPolicy", "object"),
    ("volumeClaimPolicies", "array"),
)


def validate_crd_rules_on_create(js: JobSet) -> list[FieldError]:
    """Errors the CRD's non-transition CEL rules report for ``js``."""
    errors: list[FieldError] = []
    spec = js.spec
    in_order = (
        spec.startup_policy is not None
        and spec.startup_policy.startup_policy_order == StartupPolicyOrder.IN_ORDER
    )
    if in_order and "replicated_jobs" not in spec.model_fields_set:
        message = f"no such key: replicatedJobs evaluating rule: {MUTUALLY_EXCLUSIVE_MESSAGE}"
        errors.append(FieldError("spec", "Invalid", message, "object"))
    elif in_order and any(rjob.depends_on is not None for rjob in spec.replicated_jobs):
        errors.append(FieldError("spec", "Invalid", MUTUALLY_EXCLUSIVE_MESSAGE, "object"))
    errors += _duplicate_keys([rjob.name for rjob in spec.replicated_jobs], "spec.replicatedJobs")
    for index, rjob in enumerate(spec.replicated_jobs):
        names = [dependency.name for dependency in rjob.depends_on or ()]
        errors += _duplicate_keys(names, f"spec.replicatedJobs[{index}].dependsOn")
    for index, policy in enumerate(spec.volume_claim_policies):
        if any(template.metadata.namespace for template in policy.templates):
            errors.append(
                FieldError(
                    f"spec.volumeClaimPolicies[{index}]",
                    "Invalid",
                    TEMPLATE_NAMESPACE_MESSAGE,
                    "object",
                )
            )
    return errors


def _duplicate_keys(names: list[str], path: str) -> list[FieldError]:
    """``Duplicate value`` for each item of a list-map keyed by ``name`` whose name came before."""
    seen: set[str] = set()
    errors: list[FieldError] = []
    for index, name in enumerate(names):
        if name in seen:
            errors.append(FieldError(f"{path}[{index}]", "Duplicate", "", {"name": name}))
        seen.add(name)
    return errors


def validate_crd_rules_on_update(old: JobSet, new: JobSet) -> list[FieldError]:
    """Errors the CRD's transition rules (``self == oldSelf``) report for an update."""
    old_spec = _as_api_server_sees_it(old)
    new_spec = _as_api_server_sees_it(new)
    errors = [
        FieldError(f"spec.{key}", "Invalid", IMMUTABLE_MESSAGE, cel_type)
        for key, cel_type in _IMMUTABLE_SPEC_FIELDS
        if key in old_spec and key in new_spec and old_spec[key] != new_spec[key]
    ]
    old_depends_on = {
        rjob.get("name"): rjob["dependsOn"]
        for rjob in old_spec.get("replicatedJobs", [])
        if "dependsOn" in rjob
    }
    for index, rjob in enumerate(new_spec.get("replicatedJobs", [])):
        name = rjob.get("name")
        if (
            "dependsOn" in rjob
            and name in old_depends_on
            and rjob["dependsOn"] != old_depends_on[name]
        ):
            errors.append(
                FieldError(
                    f"spec.replicatedJobs[{index}].dependsOn", "Invalid", IMMUTABLE_MESSAGE, "array"
                )
            )
    return errors


def _as_api_server_sees_it(js: JobSet) -> dict[str, Any]:
    spec = apply_crd_defaults(js).spec.to_dict()
    pruned = _without_nulls(spec)
    return pruned if isinstance(pruned, dict) else {}


def _without_nulls(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value
