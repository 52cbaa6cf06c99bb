"""How the differential tier groups an ordered JobSet's Job creations into rounds
(tests/differential/compare.py `creation_rounds`): what is a difference in order, and what is
only a loaded machine."""

from __future__ import annotations

from tests.differential.cache import Added
from tests.differential.compare import (
    REPLICATED_JOB_NAME,
    RESTART_ATTEMPT,
    ROUND_GAP,
    creation_rounds,
)


def job(name: str, replicated_job: str, seen: float, attempt: str = "0") -> Added:
    labels = {REPLICATED_JOB_NAME: replicated_job, RESTART_ATTEMPT: attempt}
    return Added(namespace="ns", name=name, labels=labels, seen=seen)


def test_each_step_of_a_waiting_controller_is_a_round() -> None:
    added = [job("d-0", "driver", 0.0), job("w-0", "workers", 3.0), job("w-1", "workers", 3.1)]
    assert creation_rounds(added, ordered=True) == [["d-0@0"], ["w-0@0", "w-1@0"]]


def test_jobs_of_one_replicated_job_seen_far_apart_stay_one_round() -> None:
    """Seen in make test run 11: the second Job of a pass arrived more than ROUND_GAP later."""
    added = [
        job("d-0", "driver", 0.0),
        job("w-1", "workers", 3.0),
        job("w-0", "workers", 3.0 + ROUND_GAP + 0.5),
    ]
    assert creation_rounds(added, ordered=True) == [["d-0@0"], ["w-0@0", "w-1@0"]]


def test_a_step_created_without_waiting_joins_the_round_before_it() -> None:
    added = [job("d-0", "driver", 0.0), job("w-0", "workers", 0.1), job("w-1", "workers", 0.2)]
    assert creation_rounds(added, ordered=True) == [["d-0@0", "w-0@0", "w-1@0"]]


def test_a_new_attempt_of_the_same_step_is_a_new_round() -> None:
    added = [job("d-0", "driver", 0.0), job("d-0", "driver", 5.0, attempt="1")]
    assert creation_rounds(added, ordered=True) == [["d-0@0"], ["d-0@1"]]
