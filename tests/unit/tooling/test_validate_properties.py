"""Property: ``jobset-controller validate`` answers any YAML/JSON document in lines, never a trace.

Documents are arbitrary nested dicts/lists/scalars (deep ones included), JobSet-shaped ones with
wrong types and nulls at the positions the code reads (metadata, spec, replicatedJobs, their
fields), and mutations of the valid examples. Whatever the document, ``main`` returns 0 or 1,
raises nothing, and every output line is one message about the file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobset_controller.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXAMPLE_DOCUMENTS = [
    document
    for path in sorted(EXAMPLES.glob("*.yaml"))
    for document in yaml.safe_load_all(path.read_text())
    if document
]

KEYS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "status",
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "finalizers",
        "replicatedJobs",
        "template",
        "replicas",
        "groupName",
        "dependsOn",
        "network",
        "successPolicy",
        "failurePolicy",
        "rules",
        "coordinator",
        "volumeClaimPolicies",
        "templates",
        "parallelism",
        "completions",
        "suspend",
        "managedBy",
        "a",
        "",
    ]
) | st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["JobSet", "jobset.x-k8s.io/v1alpha2", "Recreate", "All", "Ready"])
)
ANY_VALUE = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=30,
)


def nested(depth: int, leaf: Any, as_list: bool) -> Any:
    for _ in range(depth):
        leaf = [leaf] if as_list else {"a": leaf}
    return leaf


DEEP = st.builds(nested, st.integers(min_value=90, max_value=700), SCALARS, st.booleans())


@st.composite
def jobset_shaped(draw: st.DrawFn) -> dict[str, Any]:
    """A JobSet skeleton whose parts are each either plausible or any value at all."""

    def part(plausible: st.SearchStrategy[Any]) -> Any:
        return draw(plausible | ANY_VALUE | DEEP | st.none())

    rjob: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
        {"name": st.sampled_from(["workers", "w", "Bad_Name"]) | ANY_VALUE},
        optional={
            "template": st.just({"spec": {"template": {"spec": {"containers": []}}}}) | ANY_VALUE,
            "replicas": st.integers(min_value=-2, max_value=2**40) | ANY_VALUE,
            "groupName": ANY_VALUE,
            "dependsOn": ANY_VALUE,
        },
    )
    spec = st.fixed_dictionaries(
        {"replicatedJobs": st.lists(rjob | ANY_VALUE, max_size=3) | ANY_VALUE},
        optional={key: ANY_VALUE for key in ("network", "successPolicy", "failurePolicy")},
    )
    metadata = st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["ok", "x" * 300, "UPPER"]) | ANY_VALUE,
            "generateName": ANY_VALUE,
            "labels": st.dictionaries(KEYS, SCALARS, max_size=3) | ANY_VALUE,
            "annotations": st.dictionaries(KEYS, SCALARS, max_size=3) | ANY_VALUE,
        },
    )
    return {
        "apiVersion": part(st.just("jobset.x-k8s.io/v1alpha2")),
        "kind": part(st.just("JobSet")),
        "metadata": part(metadata),
        "spec": part(spec),
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


@st.composite
def mutated_example(draw: st.DrawFn) -> Any:
    """A valid example with one to three subtrees replaced, deleted or nulled."""
    document = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DOCUMENTS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(document)))
        if not path:
            return draw(ANY_VALUE)
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(ANY_VALUE | DEEP | st.none())
    return document


DOCUMENTS = ANY_VALUE | DEEP | jobset_shaped() | mutated_example()


def dump(document: Any, as_json: bool) -> str:
    """YAML (block style) or JSON; JSON written without recursion when the document is deep."""
    try:
        if as_json:
            return json.dumps(document)
        return yaml.safe_dump(document, allow_unicode=True)
    except RecursionError:
        return flat_json(document)


def flat_json(document: Any) -> str:
    """JSON of ``document`` by an explicit stack (JSON is YAML too), for any depth."""
    out: list[str] = []
    stack: list[Any] = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item.text)
        elif isinstance(item, dict):
            stack.append(_Text("}"))
            for position, (key, value) in reversed(list(enumerate(item.items()))):
                stack.append(value)
                stack.append(_Text(("," if position else "") + json.dumps(str(key)) + ":"))
            stack.append(_Text("{"))
        elif isinstance(item, list):
            stack.append(_Text("]"))
            for position, value in reversed(list(enumerate(item))):
                stack.append(value)
                if position:
                    stack.append(_Text(","))
            stack.append(_Text("["))
        else:
            out.append(json.dumps(item))
    return "".join(out) + "\n"


class _Text:
    def __init__(self, text: str) -> None:
        self.text = text


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(documents=st.lists(DOCUMENTS, min_size=1, max_size=3), as_json=st.booleans())
def test_validate_never_raises_and_answers_in_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], documents: list[Any], as_json: bool
) -> None:
    manifest = tmp_path / ("manifest.json" if as_json else "manifest.yaml")
    if as_json:
        text = "\n".join(dump(document, True) for document in documents[:1])
    else:
        text = "---\n".join(dump(document, False) for document in documents)
    manifest.write_text(text)
    code = main(["validate", str(manifest)])
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert code in (0, 1), output
    assert "Traceback" not in output
    for line in output.splitlines():
        assert line.startswith(f"{manifest}: "), line


@pytest.mark.parametrize("document", EXAMPLE_DOCUMENTS, ids=lambda d: d["metadata"]["name"])
def test_every_example_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: Any
) -> None:
    manifest = tmp_path / "example.yaml"
    manifest.write_text(yaml.safe_dump(document))
    assert main(["validate", str(manifest)]) == 0, capsys.readouterr().out
