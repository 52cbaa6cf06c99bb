"""Fixtures for API tests: a valid JobSet wire dict, changed by declarative patches.

A patch maps a path in the wire dict (keys and list indices) to the value to put there, so a
table row states only what differs from a valid JobSet, e.g.
``{("spec", "replicatedJobs", 0, "groupName"): "Bad"}``. The value ``...`` (Ellipsis) removes the
key instead; the index one past the end of a list appends to it.
"""

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jobset_controller.api import API_VERSION, KIND, JobSet, default_jobset

Path = tuple[str | int, ...]
Patch = Mapping[Path, Any]


def _pod_template() -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def _valid_wire() -> dict[str, Any]:
    """A valid, not yet defaulted JobSet: one leader Job of 1 pod, two worker Jobs of 4 pods."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "leader",
                    "replicas": 1,
                    "template": {
                        "spec": {"parallelism": 1, "completions": 1, "template": _pod_template()}
                    },
                },
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {"parallelism": 4, "completions": 4, "template": _pod_template()}
                    },
                },
            ]
        },
    }


def _apply(base: dict[str, Any], patch: Patch) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for path, value in patch.items():
        *parents, leaf = path
        target: Any = out
        for key in parents:
            # Missing objects on the way are created, so a patch can add nested fields.
            target = target.setdefault(key, {}) if isinstance(target, dict) else target[key]
        if value is ...:
            del target[leaf]
        elif isinstance(target, list) and leaf == len(target):
            target.append(copy.deepcopy(value))
        else:
            target[leaf] = copy.deepcopy(value)
    return out


@pytest.fixture
def apply_patch() -> Callable[[dict[str, Any], Patch], dict[str, Any]]:
    """``apply_patch(wire, patch)``: a copy of ``wire`` with ``patch`` applied."""
    return _apply


@pytest.fixture
def valid_wire() -> dict[str, Any]:
    """A fresh valid JobSet wire dict (not defaulted)."""
    return _valid_wire()


@pytest.fixture
def patched() -> Callable[[Patch], dict[str, Any]]:
    """``patched(patch)``: the valid wire dict with ``patch`` applied."""
    return lambda patch: _apply(_valid_wire(), patch)


@pytest.fixture
def admitted() -> Callable[[Patch], JobSet]:
    """``admitted(patch)``: the patched valid JobSet, defaulted as admission would."""
    return lambda patch: default_jobset(JobSet.model_validate(_apply(_valid_wire(), patch)))
