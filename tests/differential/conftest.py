"""The differential run: both sides started once, every scenario and admission case launched at
once on both, each test then waiting for its own scenario's two outcomes and comparing them.

Marks every test here `differential`. Set JOBSET_E2E_KEEP_WORKDIR=1 to keep both clusters'
directories. The controllers' logs and one JSON report per scenario and admission case (both
sides' views; `report/`) are in pytest's temporary directory (`differential0/`), or in
JOBSET_DIFFERENTIAL_DIR when set (pytest prunes its old directories, other test runs included);
a failure prints the report's path.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.differential.admission import NAMESPACE as ADMISSION_NAMESPACE
from tests.differential.admission import Case, cases, run_case
from tests.differential.allowlist import Allowed
from tests.differential.cache import Cache
from tests.differential.compare import view
from tests.differential.scenarios import Run, Scenario, all_scenarios
from tests.differential.sides import OURS, UPSTREAM, Side, start_cluster

from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import processes_mentioning
from jobset_controller_dev.envtest.upstream import ensure_upstream

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.differential)


class ScenarioFailed(Exception):
    """A driver step failed; carries what was recorded and the state at that moment."""

    def __init__(self, message: str, checkpoints: dict[str, Any], now: dict[str, Any]) -> None:
        super().__init__(message)
        self.checkpoints = checkpoints
        self.now = now


def run_scenario(side: Side, scenario: Scenario) -> dict[str, Any]:
    cluster = side.cluster
    cluster.create_namespace(scenario.id)
    for node, labels in scenario.reserve_nodes.items():
        cluster.label_nodes([node], labels)
    if scenario.volumes:
        cluster.add_volumes(scenario.volumes, prefix=f"pv-{scenario.id}")
    run = Run(side, scenario)
    try:
        scenario.drive(run)
    except Exception as error:
        assert side.cache is not None
        now = view(side.cache, run.ns, run.name, ordered=scenario.ordered)
        raise ScenarioFailed(f"{type(error).__name__}: {error}", run.checkpoints, now) from error
    return run.checkpoints


@dataclass
class Differential:
    sides: dict[str, Side]
    report_dir: Path
    scenarios: dict[str, dict[str, Future[dict[str, Any]]]] = field(default_factory=dict)
    answers: dict[str, dict[str, Future[dict[str, Any]]]] = field(default_factory=dict)
    used: set[Allowed] = field(default_factory=set)
    compared: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outcome(self, scenario: str, timeout: float = 600) -> dict[str, Any]:
        """Per side: the checkpoints, or the ScenarioFailed / other error (a TimeoutError after
        `timeout` s, scaled here: `polling.scaled`)."""
        found: dict[str, Any] = {}
        for name, future in self.scenarios[scenario].items():
            try:
                found[name] = future.result(scaled(timeout))
            except Exception as error:
                found[name] = error
        return found

    def answer(self, case: str, timeout: float = 300) -> dict[str, dict[str, Any]]:
        """Per side: the case's answer, within `timeout` s (scaled here)."""
        return {name: f.result(scaled(timeout)) for name, f in self.answers[case].items()}

    def write_report(self, name: str, data: Any) -> Path:
        path = self.report_dir / f"{name}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
        return path

    def logs(self) -> str:
        return "\n".join(
            f"--- {s.name} controller:\n{s.log_tail(2500)}" for s in self.sides.values()
        )


SCENARIOS = all_scenarios()
CASES = cases()


@pytest.fixture(scope="package")
def differential(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Differential]:
    workdir = tmp_path_factory.mktemp("differential")
    if os.environ.get("JOBSET_DIFFERENTIAL_DIR"):  # a directory other pytest runs do not prune
        workdir = Path(os.environ["JOBSET_DIFFERENTIAL_DIR"])
        workdir.mkdir(parents=True, exist_ok=True)
    keep = os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1"
    upstream_bin = ensure_upstream()
    sides: dict[str, Side] = {}
    pool = ThreadPoolExecutor(max_workers=2 * (len(SCENARIOS) + 1) + 2, thread_name_prefix="run")
    try:
        # Processes die with the thread that started them: clusters and controllers are
        # started here, in the main thread; the scenarios then run in the pool.
        for name in (UPSTREAM, OURS):
            sides[name] = Side(name, start_cluster(name, workdir, upstream_bin, keep), workdir)
        for name, side in sides.items():
            side.start_controller(upstream_bin if name == UPSTREAM else None)
        for side in sides.values():
            side.cache = Cache(side.cluster)
        for side in sides.values():
            assert side.cache is not None
            side.cache.wait_synced()
            side.wait_ready()
            side.watch_idleness(side.cache.condition)
        report_dir = workdir / "report"
        report_dir.mkdir(exist_ok=True)
        run = Differential(sides, report_dir)
        for scenario in SCENARIOS:
            run.scenarios[scenario.id] = {
                name: pool.submit(run_scenario, side, scenario) for name, side in sides.items()
            }

        def admission(side: Side) -> dict[str, dict[str, Any]]:
            side.cluster.create_namespace(ADMISSION_NAMESPACE)
            return {case.id: run_case(side, case) for case in CASES}

        batches = {name: pool.submit(admission, side) for name, side in sides.items()}
        for case in CASES:
            run.answers[case.id] = {name: _item(batch, case) for name, batch in batches.items()}
        yield run
    finally:
        for side in sides.values():
            if side.cache is not None:
                side.cache.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        codes = {
            name: side.stop_controller()
            for name, side in sides.items()
            if side.upstream is not None or side.ours is not None
        }
        for side in sides.values():
            marker = str(side.cluster.workdir)
            side.cluster.stop()
            assert processes_mentioning(marker) == [], f"{side.name}: processes left running"
        assert codes.get(OURS, 0) == 0, f"our controller exited {codes[OURS]}"


def _item(batch: Future[dict[str, dict[str, Any]]], case: Case) -> Future[dict[str, Any]]:
    """A future for one case of a batch of answers."""
    item: Future[dict[str, Any]] = Future()

    def done(finished: Future[dict[str, dict[str, Any]]]) -> None:
        error = finished.exception()
        if error is not None:
            item.set_exception(error)
        else:
            item.set_result(finished.result()[case.id])

    batch.add_done_callback(done)
    return item
