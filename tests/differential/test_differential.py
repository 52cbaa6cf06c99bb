"""Upstream's controller v0.12.0 and ours, compared scenario by scenario (marker `differential`).

The scenarios (scenarios.py: every example and the policy table) and the admission cases
(admission.py) all run at once on two fresh full local clusters, one per controller (conftest.py,
sides.py). Each test here waits for one scenario's outcome on both sides and compares every
checkpoint's view (compare.py): a difference fails the test unless the allow-list
(allowlist.py) covers it with its reason.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.differential.allowlist import ALLOWED, Allowed, unexplained
from tests.differential.compare import Difference, differences
from tests.differential.conftest import CASES, SCENARIOS, Differential, ScenarioFailed
from tests.differential.sides import OURS, UPSTREAM


def _judge(run: Differential, name: str, found: dict[str, list[Difference]]) -> list[str]:
    """The unexplained differences as lines; records the allow-list entries used."""
    lines: list[str] = []
    for checkpoint, diffs in found.items():
        scenario = f"{name}/{checkpoint}"
        bad = unexplained(scenario, diffs)
        with run.lock:
            run.used.update(a for a in ALLOWED for d in diffs if a.covers(scenario, d))
        lines.extend(f"{scenario}: {d}" for d in bad)
    return lines


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_scenario_behaves_as_upstream(differential: Differential, scenario: Any) -> None:
    outcome = differential.outcome(scenario.id)
    up, ours = outcome[UPSTREAM], outcome[OURS]
    report = differential.write_report(
        scenario.id,
        {
            side: (
                {"error": str(value), "checkpoints": value.checkpoints, "now": value.now}
                if isinstance(value, ScenarioFailed)
                else {"error": repr(value)}
                if isinstance(value, Exception)
                else value
            )
            for side, value in outcome.items()
        },
    )
    errors = [f"{side}: {value}" for side, value in outcome.items() if isinstance(value, Exception)]
    if isinstance(up, ScenarioFailed) and isinstance(ours, ScenarioFailed):
        up, ours = {**up.checkpoints, "failed": up.now}, {**ours.checkpoints, "failed": ours.now}
    if isinstance(up, Exception) or isinstance(ours, Exception):
        one_sided = {
            "upstream": up.now if isinstance(up, ScenarioFailed) else None,
            "ours": ours.now if isinstance(ours, ScenarioFailed) else None,
        }
        pytest.fail(
            f"{scenario.id}: {'; '.join(errors)}\nstate when it failed: {one_sided}\n"
            f"report: {report}\n{differential.logs()}"
        )
    assert list(up) == list(ours), f"checkpoints differ: {list(up)} vs {list(ours)}"
    found = {checkpoint: differences(up[checkpoint], ours[checkpoint]) for checkpoint in up}
    with differential.lock:
        differential.compared.add(scenario.id)
    bad = _judge(differential, scenario.id, found)
    assert not bad, "\n".join([*bad, f"report: {report}"])
    assert not errors


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_admission_answers_as_upstream(differential: Differential, case: Any) -> None:
    answers = differential.answer(case.id)
    differential.write_report(f"admission-{case.id}", answers)
    found = {"answer": differences(answers[UPSTREAM], answers[OURS])}
    with differential.lock:
        differential.compared.add(f"admission-{case.id}")
    bad = _judge(differential, f"admission-{case.id}", found)
    assert not bad, "\n".join(bad)


def test_every_allow_list_entry_is_still_needed(differential: Differential) -> None:
    """Run last: an entry no difference needed any more is removed from the list (only when
    every scenario and case was compared in this session)."""
    expected = {s.id for s in SCENARIOS} | {f"admission-{c.id}" for c in CASES}
    if differential.compared != expected:
        pytest.skip("only some scenarios ran")
    unused: list[Allowed] = [a for a in ALLOWED if a.always and a not in differential.used]
    assert not unused, f"allow-list entries no difference needed: {unused}"
