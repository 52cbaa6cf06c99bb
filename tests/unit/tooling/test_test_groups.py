"""How the parallel run groups the suite (tests/conftest.py): the groups' rules, and the list of
e2e modules sharing the package's cluster kept equal to the modules that do."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import E2E_PACKAGE_CLUSTER, EACH_TEST_ALONE, RUN_FIRST, group_of
from tests.source_trees import parse_python

TESTS = Path(__file__).resolve().parents[2]
# The fixtures of tests/e2e/conftest.py that are, or stand on, the package's full cluster.
PACKAGE_CLUSTER_FIXTURES = frozenset(
    {"full_cluster", "namespace", "controller_endpoints", "jobset_controller"}
)


def uses_package_cluster(module: Path) -> bool:
    """Whether a test function of `module` takes one of the package cluster's fixtures that
    the module does not define again for itself."""
    tree = parse_python(module)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    functions = [node for node in ast.walk(tree) if isinstance(node, kinds)]
    own = {function.name for function in functions if _is_fixture(function)}
    taken = {
        argument.arg
        for function in functions
        if function.name.startswith("test_") or _is_fixture(function)
        for argument in function.args.args
    }
    return bool((taken & PACKAGE_CLUSTER_FIXTURES) - own)


def _is_fixture(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("fixture" in ast.unparse(decorator) for decorator in function.decorator_list)


def test_the_e2e_modules_listed_as_sharing_the_package_cluster_are_exactly_those_that_do() -> None:
    modules = sorted((TESTS / "e2e").glob("test_*.py"))
    sharing = {f"e2e/{module.name}" for module in modules if uses_package_cluster(module)}
    assert sharing == E2E_PACKAGE_CLUSTER


def test_a_shared_directory_is_one_group() -> None:
    assert group_of("tests/node/test_manifests.py::test_a[chart]") == "node"
    assert group_of("tests/e2e/kueue/test_kueue_admission.py::test_b") == "e2e/kueue"
    assert group_of("tests/differential/test_crd_extensions.py::test_c") == "differential"
    assert group_of("tests/image/test_emulated_image.py::test_d") == "image"


def test_the_package_cluster_modules_are_one_group_and_other_e2e_modules_their_own() -> None:
    assert group_of("tests/e2e/test_tools.py::test_a") == "e2e"
    assert group_of("tests/e2e/test_jobset_e2e.py::test_b") == "e2e"
    assert group_of("tests/e2e/test_gang_scheduling.py::test_c") == "e2e/test_gang_scheduling.py"


def test_each_test_of_a_module_sharing_no_fixture_is_a_group_of_its_own() -> None:
    nodeid = "tests/e2e/test_bench_smoke.py::test_scale_bench_runs_at_its_smallest_size"
    assert group_of(nodeid) == nodeid
    for module in EACH_TEST_ALONE:
        assert (TESTS / module).is_file(), module
        assert not uses_package_cluster(TESTS / module)
        assert "scope=" not in (TESTS / module).read_text(), f"{module} defines a shared fixture"


def test_an_integration_or_swap_module_is_its_own_group() -> None:
    assert group_of("tests/integration/test_webhooks.py::test_a") == "integration/test_webhooks.py"
    assert group_of("tests/swap/test_swap.py::test_b") == "swap/test_swap.py"


def test_each_unit_test_is_a_group_of_its_own() -> None:
    nodeid = "tests/unit/runtime/test_clock.py::test_a[x]"
    assert group_of(nodeid) == nodeid


def test_every_tier_directory_has_a_place_in_the_run_order() -> None:
    tiers = {path.name for path in TESTS.iterdir() if path.is_dir() and path.name != "__pycache__"}
    placed = {tier.split("/")[0] for tier in RUN_FIRST}
    assert tiers <= placed
