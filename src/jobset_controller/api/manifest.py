"""A JobSet manifest judged as ``kubectl create`` would have it judged: API server, then webhook.

Why: ``validate_create`` is the webhook's half of admission and expects a well-formed JobSet. A
manifest on disk can be anything (a list, a string, ``metadata: 5``, explicit nulls, a 1 MiB
annotation, nothing but ``kind: JobSet``), and the API server answers for all of that before our
webhook is asked. ``check_manifest`` gives that whole answer for any parsed YAML/JSON document,
never raising, so a tool can print it line by line.

The API server's reading, mirrored here:

* ``status`` is dropped (the status subresource resets it on create).
* Explicit nulls are dropped wherever the schema has the field (the CRD declares nothing
  nullable), so ``annotations:`` with no value or ``spec: null`` read as absent. Inside the
  top-level ``labels`` and ``annotations`` maps a null value reads as ``""`` (Go's JSON decoding
  into ``map[string]string``). A null list item is not dropped: it is an error.
* A whole-number float (``2.0``) is read as the integer (``2``), up to ``MAX_JSON_INTEGER``.
* Mapping keys that are not strings (YAML ``1:``, ``true:``) become strings, as the YAML-to-JSON
  conversion does.
* ``apiVersion`` and ``kind`` must be ``jobset.x-k8s.io/v1alpha2`` and ``JobSet``; a document of
  another kind is not a JobSet and is left alone.
* metadata: ``object_meta.validate_object_meta``; the rest: the CRD schema (our models, including
  the CRD's CEL rules in ``crd_rules``). When any of these fail the webhook is never called, so its
  checks run only on a manifest the server itself accepts.

Deliberate differences from the API server:

* All stages' errors are reported together (apiVersion, metadata and schema problems at once),
  where the server stops at the first failing stage; accept/reject is the same.
* Unknown fields are kept and not reported (the models are lossless). The server prunes them, or
  with kubectl's default strict field validation rejects them.
* Inside the embedded Job and Pod templates only the fields the models type are checked.
* Documents nested more than ``MAX_DEPTH`` levels deep are rejected: no JobSet field is nearly that
  deep (the deepest pod template fields are about 20 levels down), so only unknown fields could be,
  and checking them would exhaust Python's recursion limit.
* Type errors carry pydantic's wording (``Input should be a valid integer``), not the OpenAPI
  validator's.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from pydantic import ValidationError

from jobset_controller.api.constants import API_VERSION, KIND
from jobset_controller.api.crd_rules import validate_crd_rules_on_create
from jobset_controller.api.defaults import default_jobset
from jobset_controller.api.features import FeatureGates
from jobset_controller.api.field_errors import FieldError
from jobset_controller.api.object_meta import validate_object_meta
from jobset_controller.api.types import JobSet, ObjectMeta
from jobset_controller.api.validation import DEFAULT_FEATURES, validate_create

MAX_DEPTH: Final = 100
# Whole floats up to 2**53 - 1 read as integers (OpenAPI validation allows them); beyond, a type
# error, as the API server reports for 1e20.
MAX_JSON_INTEGER: Final = 2**53 - 1


@dataclass(frozen=True)
class ManifestCheck:
    """The verdict on one document.

    Attributes:
        is_jobset: False for a document of another kind (not checked, no errors).
        name: The JobSet's name for messages: ``metadata.name``, else ``<generateName>*``, else "".
        errors: Everything creating it would be refused for; empty when it would be accepted.
        jobset: The JobSet as the API server would store it (not defaulted), when it would be
            accepted; None otherwise. ``plan`` reconciles exactly what was judged from this.
    """

    is_jobset: bool
    name: str
    errors: tuple[FieldError, ...]
    jobset: JobSet | None = None


def check_manifest(document: object, *, features: FeatureGates = DEFAULT_FEATURES) -> ManifestCheck:
    """Judge one parsed YAML/JSON ``document`` as a JobSet create request, as described above."""
    if not isinstance(document, Mapping):
        error = FieldError("", "Invalid", "a JobSet manifest must be an object", _shown(document))
        return ManifestCheck(True, "", (error,))
    kind = document.get("kind")
    if isinstance(kind, str) and kind and kind != KIND:
        return ManifestCheck(False, "", ())
    normalised, too_deep = _as_the_api_server_reads_it(document)
    name = _display_name(normalised.get("metadata"))
    if too_deep is not None:
        return ManifestCheck(True, name, (too_deep,))
    errors = _type_meta_errors(normalised)
    errors += _metadata_errors(normalised.get("metadata"))
    try:
        jobset = JobSet.model_validate(normalised)
    except ValidationError as error:
        spec_errors = [e for e in _schema_errors(error) if not e.field.startswith("metadata")]
        return ManifestCheck(True, name, tuple(errors + spec_errors))
    if errors:
        return ManifestCheck(True, name, tuple(errors + validate_crd_rules_on_create(jobset)))
    verdict = tuple(validate_create(default_jobset(jobset), features=features))
    return ManifestCheck(True, name, verdict, None if verdict else jobset)


def _type_meta_errors(document: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    for field, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        value = document.get(field)
        if value is None or value == "":
            errors.append(FieldError(field, "Required", f"must be {expected}"))
        elif value != expected:
            errors.append(FieldError(field, "Invalid", f"must be {expected}", _shown(value)))
    return errors


def _metadata_errors(metadata: object) -> list[FieldError]:
    try:
        parsed = ObjectMeta.model_validate({} if metadata is None else metadata)
    except ValidationError as error:
        return _schema_errors(error, prefix="metadata")
    return validate_object_meta(parsed)


def _schema_errors(error: ValidationError, prefix: str = "") -> list[FieldError]:
    """pydantic's errors as field errors: ``Required`` for a missing field, else ``Invalid``."""
    errors: list[FieldError] = []
    for item in error.errors(include_url=False):
        path = _path(prefix, item["loc"])
        if item["type"] == "missing":
            errors.append(FieldError(path, "Required", ""))
        else:
            errors.append(FieldError(path, "Invalid", item["msg"], _shown(item["input"])))
    return errors


def _path(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def _shown(value: object) -> object:
    """A bad value as printed: scalars as they are, containers by their JSON type name only."""
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    if value is None or isinstance(value, str | int | float):
        return value
    return type(value).__name__


def _display_name(metadata: object) -> str:
    if not isinstance(metadata, Mapping):
        return ""
    name, generate_name = metadata.get("name"), metadata.get("generateName")
    if isinstance(name, str) and name:
        return name
    if isinstance(generate_name, str) and generate_name:
        return f"{generate_name}*"
    return ""


class _Zone(Enum):
    """Where a mapping sits, which decides what a null value in it means."""

    ROOT = "root"
    METADATA = "metadata"
    STRING_MAP = "string map"  # the top-level labels and annotations
    OTHER = "other"


def _as_the_api_server_reads_it(
    document: Mapping[Any, Any],
) -> tuple[dict[str, Any], FieldError | None]:
    """A copy without nulls, status or non-string keys; or the path that is nested too deeply.

    Iterative, so no document can exhaust the recursion limit here.
    """
    root: dict[str, Any] = {}
    pending: list[tuple[Any, Any, str, int, _Zone]] = [(document, root, "", 1, _Zone.ROOT)]
    while pending:
        source, target, path, depth, zone = pending.pop()
        if depth > MAX_DEPTH:
            message = f"must not be nested more than {MAX_DEPTH} levels deep"
            return {}, FieldError(path, "Invalid", message, _shown(source))
        if isinstance(source, Mapping):
            for raw_key, value in source.items():
                key = _key_text(raw_key)
                if zone is _Zone.ROOT and key == "status":
                    continue
                if value is None:
                    if zone is not _Zone.STRING_MAP:
                        continue
                    value = ""
                child_path = f"{path}.{key}" if path else key
                target[key] = _copy_node(value, child_path, depth, _child_zone(zone, key), pending)
        else:
            for index, value in enumerate(source):
                target.append(_copy_node(value, f"{path}[{index}]", depth, _Zone.OTHER, pending))
    return root, None


def _copy_node(
    value: object,
    path: str,
    depth: int,
    zone: _Zone,
    pending: list[tuple[Any, Any, str, int, _Zone]],
) -> object:
    """A scalar as it is; a container as an empty copy, queued to be filled."""
    if isinstance(value, Mapping):
        mapping: dict[str, Any] = {}
        pending.append((value, mapping, path, depth + 1, zone))
        return mapping
    if isinstance(value, list | tuple):
        items: list[Any] = []
        pending.append((value, items, path, depth + 1, zone))
        return items
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_JSON_INTEGER:
        return int(value)  # the API server's integer fields take 2.0 as 2
    return value


def _child_zone(zone: _Zone, key: str) -> _Zone:
    if zone is _Zone.ROOT and key == "metadata":
        return _Zone.METADATA
    if zone is _Zone.METADATA and key in ("labels", "annotations"):
        return _Zone.STRING_MAP
    return _Zone.OTHER


def _key_text(key: object) -> str:
    """A mapping key as the YAML-to-JSON conversion writes it."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key)
