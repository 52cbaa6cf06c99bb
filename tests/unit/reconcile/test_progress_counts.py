"""Which status differences are progress counters only (`reconcile.status`)."""

from __future__ import annotations

from typing import Any

from jobset_controller.reconcile.status import differs_only_in_progress_counts


def status(**counts: int) -> dict[str, Any]:
    return {"restarts": 0, "replicatedJobsStatus": [{"name": "w", **counts}]}


def test_active_ready_succeeded_and_suspended_are_progress_counters() -> None:
    for field in ("active", "ready", "succeeded", "suspended"):
        assert differs_only_in_progress_counts(status(), status(**{field: 1}))


def test_a_failed_count_a_condition_or_a_new_entry_is_more_than_progress() -> None:
    assert not differs_only_in_progress_counts(status(), status(failed=1))
    conditions = {"conditions": [{"type": "Completed", "status": "True"}]}
    assert not differs_only_in_progress_counts(status(), status(active=1) | conditions)
    assert not differs_only_in_progress_counts({"restarts": 0}, status(active=1))


def test_equal_statuses_have_no_difference_to_hold() -> None:
    assert not differs_only_in_progress_counts(status(active=1), status(active=1))
