"""Turning the apiserver's OpenAPI v3 schemas into a CRD structural schema."""

from __future__ import annotations

from typing import Any

import pytest

from jobset_controller_dev.crdgen import StructuralConverter

COMPONENTS: dict[str, Any] = {
    "Pod": {
        "description": "A pod.",
        "type": "object",
        "properties": {
            "metadata": {
                "default": {},
                "allOf": [
                    {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
                ],
            },
            "port": {
                "allOf": [
                    {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}
                ]
            },
            "cpu": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"},
            "secrets": {
                "type": "array",
                "items": {"default": {}, "allOf": [{"$ref": "#/components/schemas/Ref"}]},
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "name",
                "x-kubernetes-patch-strategy": "merge",
            },
            "protocol": {"type": "string", "default": "TCP", "enum": ["TCP", "UDP"]},
            "count": {"type": "integer", "format": "int32", "default": 0},
        },
        "required": ["secrets"],
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
    },
    "Ref": {"type": "object", "properties": {"name": {"type": "string", "default": ""}}},
    "Loop": {"type": "object", "properties": {"self": {"$ref": "#/components/schemas/Loop"}}},
}


@pytest.fixture
def pod() -> dict[str, Any]:
    return StructuralConverter(COMPONENTS).convert_ref("Pod")


def test_references_are_inlined_and_unsupported_extensions_dropped(pod: dict[str, Any]) -> None:
    assert "x-kubernetes-group-version-kind" not in pod
    secrets = pod["properties"]["secrets"]
    assert "x-kubernetes-patch-merge-key" not in secrets
    assert secrets["x-kubernetes-list-map-keys"] == ["name"]
    assert secrets["items"]["type"] == "object"


def test_embedded_object_meta_keeps_labels_annotations_name_namespace_finalizers(
    pod: dict[str, Any],
) -> None:
    meta = pod["properties"]["metadata"]
    assert sorted(meta["properties"]) == [
        "annotations",
        "finalizers",
        "labels",
        "name",
        "namespace",
    ]


def test_int_or_string_and_quantity_accept_both_types(pod: dict[str, Any]) -> None:
    for name in ("port", "cpu"):
        prop = pod["properties"][name]
        assert prop["x-kubernetes-int-or-string"] is True
        assert "type" not in prop


def test_empty_defaults_are_dropped_but_meaningful_ones_kept(pod: dict[str, Any]) -> None:
    assert pod["properties"]["protocol"]["default"] == "TCP"
    assert "default" not in pod["properties"]["count"]
    assert "default" not in pod["properties"]["metadata"]


def test_list_map_key_keeps_its_empty_default(pod: dict[str, Any]) -> None:
    # The apiserver rejects a list-map key that is neither required nor defaulted.
    assert pod["properties"]["secrets"]["items"]["properties"]["name"]["default"] == ""


def test_descriptions_can_be_left_out() -> None:
    pod = StructuralConverter(COMPONENTS, descriptions=False).convert_ref("Pod")
    assert "description" not in pod


def test_recursive_schema_is_refused() -> None:
    with pytest.raises(ValueError, match="recursive schema"):
        StructuralConverter(COMPONENTS).convert_ref("Loop")


def test_structs_upstream_marks_atomic_are_atomic_wherever_they_are_referenced() -> None:
    """controller-gen marks a struct that inlines the atomic LocalObjectReference atomic;
    the API server's OpenAPI does not, so crdgen adds the mark (server-side apply then
    replaces `configMap: {name, items}` whole, as on upstream's CRD)."""
    volume = "io.k8s.api.core.v1.ConfigMapVolumeSource"
    components: dict[str, Any] = {
        "Volume": {
            "type": "object",
            "properties": {
                "configMap": {"description": "A volume.", "allOf": [{"$ref": f"#/x/{volume}"}]}
            },
        },
        volume: {"type": "object", "properties": {"name": {"type": "string"}}},
    }
    converted = StructuralConverter(components).convert_ref("Volume")["properties"]["configMap"]
    assert converted["x-kubernetes-map-type"] == "atomic"
    assert converted["description"] == "A volume."
    assert "x-kubernetes-map-type" not in StructuralConverter(components).convert_ref("Volume")
