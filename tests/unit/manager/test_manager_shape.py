"""The manager stays generic and small: `lifecycle` walks the phases and names no controller type,
no controller package and no feature gate (each controller's unit declares what it needs), and no
module of the manager grows past 300 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source_trees import parse_python

from jobset_controller.api.features import GATE_NAMES, FeatureGates

MANAGER = Path(__file__).resolve().parents[3] / "src" / "jobset_controller" / "manager"
GATES = set(FeatureGates.__dataclass_fields__) | set(GATE_NAMES)


def test_lifecycle_names_no_controller_type_package_or_gate() -> None:
    tree = parse_python(MANAGER / "lifecycle.py")
    imported = [
        (node.module or "", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert not [m for m, _ in imported if m.startswith("jobset_controller.controller")]
    assert not [n for _, n in imported if "JobSet" in n]
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not (names | attributes) & GATES
    strings = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert not [s for s in strings if any(gate in s for gate in GATES if gate[0].isupper())]


def test_no_manager_module_is_over_300_lines() -> None:
    long = {
        path.name: len(path.read_text().splitlines())
        for path in MANAGER.glob("*.py")
        if len(path.read_text().splitlines()) > 300
    }
    assert long == {}
