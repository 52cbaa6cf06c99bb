"""The soak's smoke: the code of `hack/soak.py` for three minutes, so the long run stays runnable.

Why in the suite: the soak runs for an hour and is run by hand; a change to the controller, to
envtest or to the soak's own pieces could break it unnoticed until the next long run. Here the
same `run()` drives our controller (two leader-elected replicas under the shipped roles) on the
full local cluster with Kueue, at one JobSet every 2 s over 32 kwok nodes, with one fault of each
kind (leader SIGKILL and SIGTERM, an API server restart, a watch expiry after an etcd compaction,
a node NotReady for a while, a burst of creates, slow clients on the metrics and webhook ports),
and every invariant of soak/checks.py must hold: each JobSet ends as its policies say, with the
restarts they say, its Events written and its children gone, nothing stuck, no traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import processes_mentioning
from jobset_controller_dev.soak import faults
from jobset_controller_dev.soak.report import table
from jobset_controller_dev.soak.run import Options, run

pytestmark = [pytest.mark.e2e, pytest.mark.kueue]


def test_three_minutes_of_churn_with_every_fault_break_no_invariant(tmp_path: Path) -> None:
    options = Options(
        controller="ours",
        minutes=3,
        seed=20261128,
        workdir=tmp_path / "soak",
        rate=0.5,
        fault_every=20,
        first_fault=15,
        nodes=32,
        burst=25,
        # Bounds twice the long run's: the suite runs this beside every other tier on 2 cores.
        stuck_after=scaled(240),
        drain_limit=scaled(300),
        node_down=30,
        slow_seconds=15,
        settle_bound=scaled(240),
        queue_never_empty=scaled(240),
        queue_cpu=8,
    )
    result = run(options)
    report = table([result.figures()])
    assert result.violations == [], report
    assert result.created > 100, report
    assert result.finished == result.created, report
    assert {line.split()[1].rstrip(":") for line in result.faults} >= set(faults.KINDS), report
    assert result.injections > 0, report
    assert processes_mentioning(str(tmp_path)) == []
