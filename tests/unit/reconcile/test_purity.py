"""reconcile/ is pure: it imports only the API of our packages and reaches for no outside world.

Checked on the source, statement by statement: no imports of I/O, clock, randomness, environment
or concurrency modules; no calls that read the current time; no module-level mutable state.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.source_trees import parse_python

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "jobset_controller" / "reconcile"
MODULES = sorted(PACKAGE.glob("*.py"))

ALLOWED_OWN = {"api", "reconcile"}
FORBIDDEN_MODULES = {
    "asyncio",
    "io",
    "logging",
    "os",
    "pathlib",
    "random",
    "secrets",
    "socket",
    "subprocess",
    "sys",
    "threading",
    "time",
    "uuid",
    "structlog",
    "kubernetes",
    "aiohttp",
    "urllib",
    "http",
}
# Calls that read the clock or the world (attribute names).
FORBIDDEN_CALLS = {"now", "utcnow", "today", "time", "monotonic", "getenv", "open", "print"}


def imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_imports_only_the_api_of_our_packages_and_nothing_impure(path: Path) -> None:
    tree = parse_python(path)
    for name in imports(tree):
        parts = name.split(".")
        if parts[0] == "jobset_controller":
            assert len(parts) > 1, f"{path.name} imports {name}"
            assert parts[1] in ALLOWED_OWN, f"{path.name} imports {name}"
        assert parts[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_reads_no_clock_and_no_environment(path: Path) -> None:
    tree = parse_python(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {name}()"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_no_global_statements_or_module_level_mutable_containers(path: Path) -> None:
    tree = parse_python(path)
    for node in ast.walk(tree):
        assert not isinstance(node, ast.Global | ast.Nonlocal), f"{path.name}:{node.lineno}"
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        mutable = isinstance(value, ast.List | ast.Set | ast.Dict | ast.ListComp | ast.DictComp)
        assert not mutable, f"{path.name}:{node.lineno} holds a mutable module-level container"


def test_the_package_exports_the_interface() -> None:
    import jobset_controller.reconcile as package

    for name in ("reconcile", "Snapshot", "Plan", "JobDelete", "JobPatch", "Event"):
        assert name in package.__all__
        assert hasattr(package, name)
