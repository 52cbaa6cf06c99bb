"""The API server's metadata checks, with its messages (apimachinery ObjectMeta validation)."""

from __future__ import annotations

from typing import Any

import pytest

from jobset_controller.api import API_VERSION, KIND
from jobset_controller.api.manifest import MAX_DEPTH, check_manifest
from jobset_controller.api.object_meta import (
    TOTAL_ANNOTATION_SIZE_LIMIT_BYTES,
    is_label_key,
    validate_object_meta,
)
from jobset_controller.api.types import ObjectMeta


def errors(**metadata: Any) -> list[str]:
    return [str(error) for error in validate_object_meta(ObjectMeta.model_validate(metadata))]


def test_a_plain_name_is_valid() -> None:
    assert errors(name="trainer", namespace="team-a", labels={"app": "x"}) == []


def test_name_or_generate_name_is_required() -> None:
    assert errors() == ["metadata.name: Required value: name or generateName is required"]
    assert errors(generateName="trainer-") == []


def test_generate_name_is_checked_with_its_trailing_dash_masked_and_as_generated() -> None:
    assert errors(generateName="Trainer-") == [
        'metadata.generateName: Invalid value: "Trainer-": a lowercase RFC 1123 subdomain must '
        "consist of lower case alphanumeric characters, '-' or '.', and must start and end with "
        "an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        'metadata.name: Invalid value: "Trainer-abcde": a lowercase RFC 1123 subdomain must '
        "consist of lower case alphanumeric characters, '-' or '.', and must start and end with "
        "an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ]


def test_namespace_must_be_a_label() -> None:
    assert errors(name="x", namespace="a.b") == [
        'metadata.namespace: Invalid value: "a.b": must not contain dots'
    ]
    [too_long] = errors(name="x", namespace="a" * 64)
    assert too_long.endswith("must be no more than 63 characters")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("app", []),
        ("example.com/app", []),
        ("/app", ["prefix part must be non-empty"]),
        ("example.com/", ["name part must be non-empty", "name part must consist of"]),
        ("a/b/c", ["a valid label key must consist of"]),
        ("x" * 64, ["name part must be no more than 63 characters"]),
    ],
)
def test_label_keys(key: str, expected: list[str]) -> None:
    messages = is_label_key(key)
    assert len(messages) == len(expected)
    for message, start in zip(messages, expected, strict=True):
        assert message.startswith(start)


def test_label_values_and_keys_are_reported_at_the_map() -> None:
    found = errors(name="x", labels={"ok": "not ok!", "bad key!": "v"})
    assert [error.split(":")[0:2] for error in found] == [
        ["metadata.labels", " Invalid value"],
        ["metadata.labels", " Invalid value"],
    ]
    assert '"not ok!": a valid label must be an empty string' in found[0]
    assert '"bad key!": name part must consist of' in found[1]


def test_annotation_keys_ignore_case() -> None:
    assert errors(name="x", annotations={"Example.COM/Owner": "me"}) == []


def test_annotations_total_size_limit_counts_keys_and_values_in_bytes() -> None:
    at_limit = {"k": "x" * (TOTAL_ANNOTATION_SIZE_LIMIT_BYTES - 1)}
    assert errors(name="x", annotations=at_limit) == []
    over = {"k": "é" * (TOTAL_ANNOTATION_SIZE_LIMIT_BYTES // 2)}
    assert errors(name="x", annotations=over) == [
        "metadata.annotations: Too long: may not be more than 262144 bytes"
    ]


def test_finalizers() -> None:
    assert errors(name="x", finalizers=["example.com/cleanup"]) == []
    found = errors(name="x", finalizers=["orphan", "foregroundDeletion"])
    assert found == [
        'metadata.finalizers: Invalid value: ["orphan","foregroundDeletion"]: '
        "finalizer orphan and foregroundDeletion cannot be both set"
    ]


def test_generation_is_not_checked_on_create_because_the_server_replaces_it() -> None:
    # Found by tests/integration/test_validate_differential.py: the server accepts generation -1.
    assert errors(name="x", generation=-1) == []


# --- check_manifest ------------------------------------------------------------------------------


def manifest(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "x"}, **fields}


def test_other_kinds_are_not_checked() -> None:
    check = check_manifest({"apiVersion": "v1", "kind": "ConfigMap", "metadata": 5})
    assert (check.is_jobset, check.errors) == (False, ())


def test_a_jobset_without_replicated_jobs_is_accepted_like_the_crd_does() -> None:
    assert check_manifest(manifest()).errors == ()
    assert check_manifest(manifest(spec=None)).errors == ()


def test_metadata_and_schema_errors_are_reported_together_without_the_webhook() -> None:
    document = manifest(
        metadata={"name": "UPPER"},
        spec={"replicatedJobs": [{"name": "w"}], "successPolicy": {"operator": "All"}},
    )
    found = [str(error) for error in check_manifest(document).errors]
    assert found[0].startswith('metadata.name: Invalid value: "UPPER"')
    assert found[1:] == ["spec.replicatedJobs[0].template: Required value"]


def test_webhook_checks_run_once_the_api_server_would_accept() -> None:
    document = manifest(
        spec={"replicatedJobs": [{"name": "w", "groupName": "No_", "template": {}}]}
    )
    [error] = check_manifest(document).errors
    assert error.field == "spec.replicatedJobs[0].groupName"


def test_non_string_keys_read_as_strings() -> None:
    document: dict[Any, Any] = {**manifest(), 2: "x", False: "y", None: "z", 1.5: "w"}
    check = check_manifest(document)
    assert check.errors == ()


def test_depth_limit_names_the_path() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    [error] = check_manifest(manifest(spec={"extra": deep})).errors
    assert error.field.startswith("spec.extra[0][0]")
    assert error.message == f"must not be nested more than {MAX_DEPTH} levels deep"


# Found by tests/integration/test_validate_differential.py (the API server's answers).
def _rjob(name: str, replicas: object = 1, **fields: Any) -> dict[str, Any]:
    pod = {"containers": [{"name": "main", "image": "busybox"}]}
    template = {"spec": {"template": {"spec": pod}}}
    return {"name": name, "replicas": replicas, "template": template, **fields}


def test_whole_number_floats_read_as_integers_like_the_api_server() -> None:
    assert check_manifest(manifest(spec={"replicatedJobs": [_rjob("w", 2.0)]})).errors == ()
    [error] = check_manifest(manifest(spec={"replicatedJobs": [_rjob("w", 1e20)]})).errors
    assert error.field == "spec.replicatedJobs[0].replicas"


def test_repeated_list_map_keys_are_duplicates_like_the_crd_schema() -> None:
    document = manifest(spec={"replicatedJobs": [_rjob("w"), _rjob("v"), _rjob("w")]})
    assert [str(e) for e in check_manifest(document).errors] == [
        'spec.replicatedJobs[2]: Duplicate value: {"name":"w"}'
    ]
    twice = [{"name": "a", "status": "Complete"}, {"name": "a", "status": "Ready"}]
    document = manifest(spec={"replicatedJobs": [_rjob("a"), _rjob("b", dependsOn=twice)]})
    assert [str(e) for e in check_manifest(document).errors] == [
        'spec.replicatedJobs[1].dependsOn[1]: Duplicate value: {"name":"a"}'
    ]


def test_in_order_without_a_replicated_jobs_key_fails_the_crd_rule() -> None:
    in_order = {"startupPolicy": {"startupPolicyOrder": "InOrder"}}
    assert [str(e) for e in check_manifest(manifest(spec=in_order)).errors] == [
        'spec: Invalid value: "object": no such key: replicatedJobs evaluating rule: '
        "StartupPolicy and DependsOn APIs are mutually exclusive"
    ]
    assert check_manifest(manifest(spec={**in_order, "replicatedJobs": []})).errors == ()
