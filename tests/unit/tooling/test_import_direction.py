"""The dependency direction of docs/architecture.md, checked on every import statement.

cli -> manager -> controller -> {reconcile, runtime, webhook} -> api. `reconcile` never imports
`runtime`; `runtime` never imports `api` or `reconcile`; `api` imports no other package of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "jobset_controller"

# package (first component under jobset_controller) -> packages it must not import
FORBIDDEN: dict[str, set[str]] = {
    "api": {"reconcile", "runtime", "controller", "manager", "cli", "webhook", "envtest"},
    "reconcile": {"runtime", "controller", "manager", "cli", "webhook", "envtest"},
    "runtime": {"api", "reconcile", "controller", "manager", "cli", "webhook", "envtest"},
    "webhook": {"reconcile", "runtime", "controller", "manager", "cli", "envtest"},
    "controller": {"manager", "cli", "envtest"},
    "manager": {"cli", "envtest"},
}


def imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "jobset_controller" and len(parts) > 1:
                found.add(parts[1])
    return found


def owning_package(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_module_imports_follow_the_dependency_direction(path: Path) -> None:
    owner = owning_package(path)
    bad = imported_packages(path) & FORBIDDEN.get(owner, set())
    assert not bad, f"{path.relative_to(PACKAGE)} ({owner}) must not import {sorted(bad)}"
