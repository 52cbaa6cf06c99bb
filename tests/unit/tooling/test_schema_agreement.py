"""The JobSet schema is written twice; this test pins that both spellings agree.

One spelling is the pydantic models of ``jobset_controller.api.types`` (what the controller and the
webhooks accept and read). The other is the hand-built OpenAPI schema of
``jobset_controller_dev.crdgen`` (what the API server accepts, once rendered into the CRD). The walk
below visits both side by side and reports every difference with the wire path where it is, e.g.
``spec.replicatedJobs[].dependsOn[].status: enum ...``. It compares:

* field names, both ways, for every object the JobSet API owns;
* the kind of every node: string, integer, boolean, list, map (``additionalProperties``), object;
* integers and booleans are strict in the models, as the API server's schema is (no ``"3"`` -> 3);
* required-ness (a model field without a default <-> listed in ``required``);
* enums (a ``StrEnum`` <-> ``enum`` with the same values);
* defaults (a CRD ``default`` <-> the model's default, and a meaningful model default must be in
  the CRD too), ``minimum`` <-> ``ge`` and ``maxItems`` <-> ``max_length``.

The embedded batch/v1 JobTemplateSpec and core/v1 PersistentVolumeClaim are not written in crdgen:
they come from a real API server's OpenAPI document into the committed manifest. The models type
only a few of their fields, so for those the walk checks one way, against the committed
manifest: every typed field exists there, with the same kind.

Deliberate differences are listed in ``KNOWN_DIFFERENCES`` with the reason; anything else fails.
"""

from __future__ import annotations

import types
import typing
from enum import StrEnum
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import yaml
from pydantic import BaseModel, Strict
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from jobset_controller.api.types import JobSet, JobTemplateSpec, PersistentVolumeClaim
from jobset_controller_dev import crdgen

Schema = dict[str, Any]

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "manifests" / "crd" / "bases" / crdgen.CRD_FILE

# Markers standing in for the embedded schemas that crdgen takes from the API server's OpenAPI.
_EMBEDDED = "x-test-embedded"
_FAKE_DOCUMENTS = {
    "batch": {
        "components": {
            "schemas": {
                "io.k8s.api.batch.v1.JobTemplateSpec": {"type": "object", "format": _EMBEDDED}
            }
        }
    },
    "core": {
        "components": {
            "schemas": {
                "io.k8s.api.core.v1.PersistentVolumeClaim": {"type": "object", "format": _EMBEDDED}
            }
        }
    },
}

# (wire path, aspect) -> why the two spellings differ on purpose.
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {
    ("spec.failurePolicy.rules[].name", "required"): (
        "the CRD requires it, but the defaulting webhook (which runs before the schema is checked) "
        "fills in failurePolicyRule<i> when it is empty, so the model must accept it absent"
    ),
    ("spec.volumeClaimPolicies[].templates", "required"): (
        "the CRD requires it; the model reads an absent list as empty, as it does for every list, "
        "so the webhooks can parse the object and leave the refusal to the API server's schema"
    ),
    ("apiVersion", "default"): (
        "a JobSet read from the API server always carries it; the model reads it as the JobSet's "
        "own so that objects built in code need not spell it out"
    ),
    ("kind", "default"): "as for apiVersion",
    **{
        (f"status.conditions[].{field}", aspect): (
            "metav1.Condition's string bounds are checked by the API server on every status write; "
            "the model does not repeat them (the controller writes only the reasons and messages "
            "of its catalogue, whose reasons follow the pattern: rule names are checked against it)"
        )
        for field, aspect in (
            ("message", "maxLength"),
            ("reason", "minLength"),
            ("reason", "maxLength"),
            ("reason", "pattern"),
            ("type", "maxLength"),
            ("type", "pattern"),
        )
    },
}

# Fields of the shared ObjectMeta model that an embedded template's metadata does not keep: the CRD
# keeps only what controller-gen keeps for embedded metadata (labels, annotations, name, namespace,
# finalizers). The model is shared with the JobSet's own metadata, which has them all.
OBJECT_META_NOT_EMBEDDED = frozenset(
    {
        "generateName",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "ownerReferences",
    }
)


# --- the model side, normalised -------------------------------------------------------------------


class ModelNode(typing.NamedTuple):
    """One node of a model's type: its kind and what it holds."""

    kind: str  # string | integer | boolean | array | map | object | any
    strict: bool = False
    enum: frozenset[str] | None = None
    model: type[BaseModel] | None = None
    item: Any = None  # annotation of list items or map values
    item_metadata: tuple[Any, ...] = ()


def _unwrap(annotation: Any, metadata: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """Strip ``X | None`` and ``Annotated[X, ...]``, collecting the Annotated metadata."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            assert len(args) == 1, f"unsupported union {annotation!r}"
            annotation = args[0]
        elif origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            metadata = (*metadata, *extra)
        else:
            return annotation, metadata


def model_node(annotation: Any, metadata: tuple[Any, ...] = ()) -> ModelNode:
    annotation, metadata = _unwrap(annotation, metadata)
    strict = any(isinstance(m, Strict) and m.strict for m in metadata)
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return ModelNode("array", item=item)
    if origin is dict:
        key, value = typing.get_args(annotation)
        assert key is str, f"map keys must be strings, got {key!r}"
        if value is Any:
            return ModelNode("any")
        return ModelNode("map", item=value)
    if annotation is Any:
        return ModelNode("any")
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return ModelNode("object", model=annotation)
        if issubclass(annotation, StrEnum):
            return ModelNode("string", enum=frozenset(m.value for m in annotation))
        if annotation is bool:
            return ModelNode("boolean", strict=strict)
        if annotation is int:
            return ModelNode("integer", strict=strict)
        if annotation is str:
            return ModelNode("string")
    raise AssertionError(f"unsupported model annotation {annotation!r}")


def _wire_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {(info.alias or name): info for name, info in model.model_fields.items()}


def _bound(info: FieldInfo, kind: type) -> Any:
    for m in info.metadata:
        if isinstance(m, kind):
            return m
    return None


# --- the schema side, normalised ------------------------------------------------------------------


def schema_kind(schema: Schema) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    kind = schema.get("type")
    if kind == "object":
        if "properties" in schema:
            return "object"
        if "additionalProperties" in schema:
            return "map"
        return "opaque"
    assert isinstance(kind, str), f"schema without a type: {schema!r}"
    return kind


# --- the walk -------------------------------------------------------------------------------


class Walk:
    """Compares a model with a schema, collecting every difference as ``path: what``."""

    def __init__(self, *, exact: bool) -> None:
        # exact: the JobSet-owned part, where both sides must say the same thing.
        # not exact: an embedded Kubernetes type, where the model types a subset of the schema.
        self.exact = exact
        self.errors: list[str] = []
        self.embedded: list[str] = []  # paths where crdgen defers to the API server's schema
        self.known_seen: set[tuple[str, str]] = set()

    def differ(self, path: str, aspect: str, what: str) -> None:
        if (path, aspect) in KNOWN_DIFFERENCES:
            self.known_seen.add((path, aspect))
            return
        self.errors.append(f"{path or '<root>'}: {what}")

    def node(self, path: str, node: ModelNode, schema: Schema) -> None:
        if schema.get("format") == _EMBEDDED:
            self.embedded.append(path)
            if node.kind != "object":
                self.differ(path, "kind", f"model has {node.kind}, schema an embedded object")
            return
        kind = schema_kind(schema)
        if node.kind == "any":
            if self.exact and kind != "opaque":
                self.differ(path, "kind", f"model takes any value, schema has {kind}")
            return
        if kind == "opaque":
            if node.kind not in ("object", "map"):
                self.differ(path, "kind", f"model has {node.kind}, schema an object")
            return
        if node.kind != kind:
            self.differ(path, "kind", f"model has {node.kind}, schema has {kind}")
            return
        if kind in ("integer", "boolean") and not node.strict:
            self.differ(path, "strict", f"model {kind} is not strict, the schema's is")
        if kind == "string":
            schema_enum = frozenset(schema["enum"]) if "enum" in schema else None
            # An embedded Kubernetes type may be typed as a plain string; the API server checks it.
            if node.enum != schema_enum and (self.exact or node.enum is not None):
                self.differ(
                    path,
                    "enum",
                    f"enum differs: model {sorted(node.enum or ())}, "
                    f"schema {sorted(schema_enum or ())}",
                )
        if kind == "array":
            self.node(f"{path}[]", model_node(node.item), schema["items"])
        elif kind == "map":
            self.node(f"{path}{{}}", model_node(node.item), schema["additionalProperties"])
        elif kind == "object":
            assert node.model is not None
            self.object(path, node.model, schema)

    def object(self, path: str, model: type[BaseModel], schema: Schema) -> None:
        fields = _wire_fields(model)
        properties: dict[str, Schema] = schema["properties"]
        required = set(schema.get("required", ()))
        prefix = f"{path}." if path else ""
        embedded_meta = not self.exact and set(properties) == {
            "annotations",
            "finalizers",
            "labels",
            "name",
            "namespace",
        }
        for wire in sorted(set(fields) - set(properties)):
            if embedded_meta and wire in OBJECT_META_NOT_EMBEDDED:
                continue
            self.differ(f"{prefix}{wire}", "field", f"in {model.__name__}, not in the schema")
        if self.exact:
            for wire in sorted(set(properties) - set(fields)):
                self.differ(f"{prefix}{wire}", "field", f"in the schema, not in {model.__name__}")
        for wire in sorted(set(fields) & set(properties)):
            self.field(f"{prefix}{wire}", fields[wire], properties[wire], wire in required)

    def field(self, path: str, info: FieldInfo, schema: Schema, required: bool) -> None:
        if info.is_required() != required and (self.exact or info.is_required()):
            self.differ(
                path,
                "required",
                f"required in the {'model' if info.is_required() else 'schema'} only",
            )
        self.defaults(path, info, schema)
        ge = _bound(info, annotated_types.Ge)
        if (ge.ge if ge else None) != schema.get("minimum"):
            self.differ(
                path, "minimum", f"model ge={ge.ge if ge else None}, schema {schema.get('minimum')}"
            )
        max_len = _bound(info, annotated_types.MaxLen)
        if self.exact and (max_len.max_length if max_len else None) != schema.get("maxItems"):
            self.differ(
                path,
                "maxItems",
                f"model max_length={max_len.max_length if max_len else None}, "
                f"schema maxItems={schema.get('maxItems')}",
            )
        if self.exact:
            self.string_bounds(path, info, schema)
        self.node(path, model_node(info.annotation, tuple(info.metadata)), schema)

    def string_bounds(self, path: str, info: FieldInfo, schema: Schema) -> None:
        """``minLength``/``maxLength``/``pattern`` <-> the field's ``min_length``/``max_length``/
        ``pattern`` (for strings; for lists only ``maxItems`` is a bound, compared above)."""
        if schema_kind(schema) != "string":
            return
        for key, kind, attribute in (
            ("minLength", annotated_types.MinLen, "min_length"),
            ("maxLength", annotated_types.MaxLen, "max_length"),
        ):
            bound = _bound(info, kind)
            model_value = getattr(bound, attribute) if bound else None
            if model_value != schema.get(key):
                self.differ(path, key, f"model {attribute}={model_value}, schema {schema.get(key)}")
        pattern = next((m.pattern for m in info.metadata if hasattr(m, "pattern")), None)
        if pattern != schema.get("pattern"):
            self.differ(
                path, "pattern", f"model pattern {pattern!r}, schema {schema.get('pattern')!r}"
            )

    def defaults(self, path: str, info: FieldInfo, schema: Schema) -> None:
        default = None if info.default is PydanticUndefined else info.default
        if isinstance(default, StrEnum):
            default = default.value
        if "default" in schema:
            if default != schema["default"]:
                self.differ(
                    path, "default", f"model default {default!r}, schema {schema['default']!r}"
                )
        elif self.exact and default not in (None, "", 0, False):
            self.differ(path, "default", f"model default {default!r}, none in the schema")


def _crdgen_schema() -> Schema:
    crd = crdgen.build_crd(_FAKE_DOCUMENTS["batch"], _FAKE_DOCUMENTS["core"])
    schema: Schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _manifest_schema() -> Schema:
    crd = yaml.load(MANIFEST.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema: Schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _at(schema: Schema, path: str) -> Schema:
    for part in path.split("."):
        list_item = part.endswith("[]")
        schema = schema["properties"][part.removesuffix("[]")]
        if list_item:
            schema = schema["items"]
    return schema


def test_models_and_crdgen_describe_the_same_jobset() -> None:
    walk = Walk(exact=True)
    walk.object("", JobSet, _crdgen_schema())
    assert walk.errors == [], "the models and crdgen disagree:\n" + "\n".join(walk.errors)
    assert sorted(walk.embedded) == [
        "spec.replicatedJobs[].template",
        "spec.volumeClaimPolicies[].templates[]",
    ]


def test_every_known_difference_still_exists() -> None:
    """A deliberate difference that went away must leave the list, so the list stays true."""
    walk = Walk(exact=True)
    walk.object("", JobSet, _crdgen_schema())
    assert walk.known_seen == set(KNOWN_DIFFERENCES)


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("spec.replicatedJobs[].template", JobTemplateSpec),
        ("spec.volumeClaimPolicies[].templates[]", PersistentVolumeClaim),
    ],
)
def test_typed_template_fields_exist_in_the_generated_crd(
    path: str, model: type[BaseModel]
) -> None:
    walk = Walk(exact=False)
    walk.object(path, model, _at(_manifest_schema(), path))
    assert walk.errors == [], f"typed fields of {model.__name__} disagree with the CRD:\n" + (
        "\n".join(walk.errors)
    )


def test_the_walk_reports_differences_with_their_path() -> None:
    """The walk itself: renamed fields, enums, defaults, required-ness and kinds are caught."""

    class Inner(BaseModel):
        mode: typing.Literal["x"] | None = None

    schema = _crdgen_schema()
    spec = schema["properties"]["spec"]["properties"]
    spec["startupPolicy"]["properties"]["startupPolicyOrder"]["enum"] = ["AnyOrder"]
    spec["coordinator"]["properties"]["podIdx"] = spec["coordinator"]["properties"].pop("podIndex")
    spec["replicatedJobs"]["items"]["properties"]["replicas"]["default"] = 2
    spec["network"]["required"] = ["subdomain"]
    spec["suspend"]["type"] = "string"
    walk = Walk(exact=True)
    walk.object("", JobSet, schema)
    assert sorted(walk.errors) == [
        "spec.coordinator.podIdx: in the schema, not in Coordinator",
        "spec.coordinator.podIndex: in Coordinator, not in the schema",
        "spec.network.subdomain: required in the schema only",
        "spec.replicatedJobs[].replicas: model default 1, schema 2",
        "spec.startupPolicy.startupPolicyOrder: enum differs: model ['AnyOrder', 'InOrder'], "
        "schema ['AnyOrder']",
        "spec.suspend: model has boolean, schema has string",
    ]
    with pytest.raises(AssertionError, match="unsupported"):
        model_node(Inner.model_fields["mode"].annotation)
