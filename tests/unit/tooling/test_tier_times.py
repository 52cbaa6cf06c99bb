"""hack/tier_times.py: what each tier of one run cost, from pytest's JUnit report."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.tooling.hack_scripts import load_script

tier_times = load_script("tier_times")

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5" time="100.0">
<testcase classname="tests.unit.api.test_a" name="test_one" time="0.5"/>
<testcase classname="tests.e2e.test_b" name="test_two" time="30.0"/>
<testcase classname="tests.e2e.kueue.test_c" name="test_three" time="60.0">
  <failure message="x"/></testcase>
<testcase classname="tests.e2e.trainer.test_d" name="test_four" time="9.5">
  <skipped message="y"/></testcase>
<testcase classname="tests.integration.test_e.TestGroup" name="test_five" time="20.0"/>
</testsuite></testsuites>
"""


@pytest.mark.parametrize(
    ("classname", "tier"),
    [
        ("tests.unit.runtime.test_x", "unit"),
        ("tests.e2e.test_x", "e2e"),
        ("tests.e2e.kueue.test_x", "e2e/kueue"),
        ("tests.e2e.trainer.test_x.TestY", "e2e/trainer"),
        ("tests.e2e.kueuex.test_x", "e2e"),
        ("tests.node.test_x", "node"),
    ],
)
def test_a_test_belongs_to_the_directory_it_is_in_with_kueue_and_trainer_apart(
    classname: str, tier: str
) -> None:
    assert tier_times.tier_of(classname) == tier


def test_the_report_counts_tests_failures_skips_and_summed_durations_per_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    assert tier_times.main([str(report)]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert lines["e2e/kueue"][1:4] == ["1", "1", "0"]
    assert lines["e2e/trainer"][1:4] == ["1", "0", "1"]
    assert lines["all"][1:] == ["5", "1", "1", "2", "min", "00", "s"]
    assert lines["wall"][2:5] == ["1", "min", "40"]
    assert "1.2x" in " ".join(lines["wall"])
