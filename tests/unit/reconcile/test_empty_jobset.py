"""A JobSet the CRD admits without replicatedJobs fails once, saying why, and then stays quiet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import JobSet
from jobset_controller.reconcile.catalogue import (
    NO_REPLICATED_JOBS_MESSAGE,
    VALIDATION_FAILED_REASON,
)

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import Kit

EXPECTED_MESSAGE = (
    f"jobset is invalid: spec.replicatedJobs: Required value: {NO_REPLICATED_JOBS_MESSAGE}"
)


def empty_jobsets(kit: Kit) -> dict[str, JobSet]:
    """The shapes the API server stores for "no replicatedJobs" (it drops explicit nulls)."""
    wire: dict[str, Any] = kit.jobset().wire()
    no_spec = {key: value for key, value in wire.items() if key != "spec"}
    return {
        "empty list": JobSet.model_validate(wire),
        "no replicatedJobs": JobSet.model_validate({**wire, "spec": {"suspend": False}}),
        "no spec": JobSet.model_validate(no_spec),
    }


@pytest.mark.parametrize("shape", ["empty list", "no replicatedJobs", "no spec"])
def test_jobset_without_replicated_jobs_fails_saying_why(kit: Kit, shape: str) -> None:
    plan = kit.reconcile(empty_jobsets(kit)[shape])

    assert plan.status is not None
    assert plan.status["terminalState"] == "Failed"
    failed = {c["type"]: c for c in plan.status["conditions"]}["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", VALIDATION_FAILED_REASON)
    assert failed["message"] == EXPECTED_MESSAGE
    assert [(e.type, e.reason, e.note, e.after_status) for e in plan.events] == [
        ("Warning", VALIDATION_FAILED_REASON, EXPECTED_MESSAGE, True)
    ]
    assert plan.failed
    assert plan.jobs_to_create == ()
    assert plan.service_to_create is None
    assert plan.pvcs_to_create == ()


def test_suspended_jobset_without_replicated_jobs_fails_too(kit: Kit) -> None:
    plan = kit.reconcile(kit.jobset().suspend())
    assert plan.failed
    assert [e.reason for e in plan.events] == [VALIDATION_FAILED_REASON]


def test_the_event_is_emitted_once(kit: Kit) -> None:
    first = kit.reconcile(kit.jobset())
    snapshot, plan = kit.settle(kit.snapshot(kit.jobset()))

    assert plan.is_empty()
    assert [e.reason for e in first.events] == [VALIDATION_FAILED_REASON]
    status = snapshot.jobset.status
    assert [(c.type, c.reason) for c in status.conditions] == [("Failed", VALIDATION_FAILED_REASON)]


def test_other_validation_errors_take_precedence(kit: Kit) -> None:
    plan = kit.reconcile(kit.jobset().success_policy("All", "nope"))
    failed = {c["type"]: c for c in (plan.status or {})["conditions"]}["Failed"]
    assert "spec.successPolicy.targetReplicatedJobs[0]" in failed["message"]
