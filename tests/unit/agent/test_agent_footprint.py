"""The agent runs in every pod of the largest JobSets, so it loads nothing of the controller: no
API models (and no pydantic behind them), no reconcile, no controller glue, no metrics server.
Checked in a fresh interpreter, as a pod starts it."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "pydantic",
    "prometheus_client",
    "jobset_controller.api.types",
    "jobset_controller.reconcile",
    "jobset_controller.controller",
    "jobset_controller.manager",
    "jobset_controller.webhook",
)


def test_the_agent_imports_nothing_of_the_controller() -> None:
    probe = (
        "import sys; import jobset_controller.agent; "
        f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert loaded == "[]", loaded
