"""hack/tools_needed.py: what `hack/test.sh <selection>` builds is what the selection's markers
need, so the quick path builds nothing and a selected tier never runs without its tools."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.unit.tooling.hack_scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "tools_needed.py"
NEEDS: dict[str, tuple[str, ...]] = load_script("tools_needed").NEEDS


# The markers whose tests run no built tool.
NEEDS_NOTHING = frozenset({"unit"})


def tools_for(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def test_every_declared_marker_says_which_tools_its_tests_need() -> None:
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    declared = {line.split(":", 1)[0] for line in pytest_options["ini_options"]["markers"]}
    assert declared - NEEDS_NOTHING == set(NEEDS)


def test_unit_tests_need_no_tool_but_those_marked_tools() -> None:
    # One directory of the unit tier that has both kinds (collecting the whole tier costs
    # seconds; hack/test.sh runs the same code on the whole selection anyway).
    assert tools_for("tests/unit/tooling", "-m", "not tools") == []
    assert tools_for("tests/unit/tooling") == ["k8s-helm", "prometheus"]


def test_a_bench_smoke_test_beside_upstream_needs_the_cluster_and_upstreams_controller() -> None:
    selected = tools_for("tests/e2e/test_bench_smoke.py", "-k", "events_bench")
    assert selected == ["k8s", "upstream"]
