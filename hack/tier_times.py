"""What each tier of one pytest run cost: tests, failures, and the sum of their durations.

    hack/tier_times.py build/test-report.xml

Why the sum and not a wall time: the suite runs its tiers at the same time (docs/testing.md,
"How the suite runs"), so a tier has no wall time of its own inside a run; the sum of its tests'
durations (setup, call and teardown, so a module's cluster start is counted once, in its first
test) is what the tier costs a worker, and what it would take alone, one test at a time. The
report is the JUnit XML that hack/test.sh has pytest write for every run.

Tiers are the directories under tests/ (tests/e2e/kueue and tests/e2e/trainer apart from the
rest of tests/e2e), as docs/testing.md's table lists them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence

# Sub-packages reported as tiers of their own (the longest prefix wins).
SUB_TIERS = ("e2e.kueue", "e2e.trainer")


@dataclasses.dataclass
class Tier:
    tests: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0


def tier_of(classname: str) -> str:
    """`tests.e2e.kueue.test_x.TestY` -> `e2e/kueue`; `tests.unit.api.test_z` -> `unit`."""
    parts = classname.split(".")
    if parts and parts[0] == "tests":
        parts = parts[1:]
    dotted = ".".join(parts)
    for sub in SUB_TIERS:
        if dotted.startswith(sub + "."):
            return sub.replace(".", "/")
    return parts[0] if parts else "?"


def tally(cases: Iterable[ElementTree.Element]) -> dict[str, Tier]:
    tiers: dict[str, Tier] = {}
    for case in cases:
        tier = tiers.setdefault(tier_of(case.get("classname", "")), Tier())
        tier.tests += 1
        tier.seconds += float(case.get("time", "0") or 0)
        if case.find("failure") is not None or case.find("error") is not None:
            tier.failed += 1
        elif case.find("skipped") is not None:
            tier.skipped += 1
    return tiers


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60:02d} s" if whole >= 60 else f"{whole} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="pytest's JUnit XML (hack/test.sh: build/test-report.xml)")
    args = parser.parse_args(argv)
    root = ElementTree.parse(args.report).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tiers = tally(case for suite in suites for case in suite.iter("testcase"))
    wall = sum(float(suite.get("time", "0") or 0) for suite in suites)
    print(f"{'tier':<12} {'tests':>6} {'failed':>6} {'skipped':>7}  sum of durations")
    for name in sorted(tiers, key=lambda n: -tiers[n].seconds):
        tier = tiers[name]
        print(f"{name:<12} {tier.tests:>6} {tier.failed:>6} {tier.skipped:>7}  "
              f"{minutes(tier.seconds)}")  # fmt: skip
    total = sum(t.seconds for t in tiers.values())
    counts = [
        sum(getattr(t, field) for t in tiers.values()) for field in ("tests", "failed", "skipped")
    ]
    print(f"{'all':<12} {counts[0]:>6} {counts[1]:>6} {counts[2]:>7}  {minutes(total)}")
    if wall:
        print(f"wall time {minutes(wall)}: the tests' durations add up to {total / wall:.1f}x it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
