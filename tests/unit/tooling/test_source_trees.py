"""tests/source_trees.py: the parse that no collector run can break on CPython 3.11.7."""

from __future__ import annotations

import ast
import gc
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.source_trees import parse_python

TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_enabled, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    yield
    gc.set_threshold(*thresholds)
    if not was_enabled:
        gc.disable()


class Finalised:
    """A cycle whose finaliser notes that it ran."""

    def __init__(self, ran: list[str]) -> None:
        self.ran, self.me = ran, self

    def __del__(self) -> None:
        self.ran.append("finalised")


@pytest.mark.usefixtures("collector_on")
def test_no_finaliser_runs_inside_the_parse_and_the_collector_is_on_after_it() -> None:
    ran: list[str] = []
    source = "x = [" + ", ".join(str(n) for n in range(2000)) + "]"
    gc.collect()
    gc.set_threshold(1)  # the collector would run at nearly every allocation
    Finalised(ran)  # garbage, reachable only from itself
    tree = parse_python(source)
    assert ran == []
    assert gc.isenabled()
    gc.collect()
    assert ran == ["finalised"]
    assert isinstance(tree.body[0], ast.Assign)


def test_a_collector_found_off_is_left_off() -> None:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        parse_python(Path(__file__))
        assert not gc.isenabled()
    finally:
        if was_enabled:
            gc.enable()


def test_every_test_parses_python_through_source_trees() -> None:
    bare = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "source_trees.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bast\.parse\(", line) and not line.lstrip().startswith("#")
    ]
    assert bare == []
