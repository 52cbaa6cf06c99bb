"""Plan values are validated on construction: a Plan the executor cannot carry out cannot exist."""

from __future__ import annotations

from typing import Any

import pytest

from jobset_controller.reconcile import WRITE_ORDER, Event, JobDelete, JobPatch, Plan, WritePhase

STATUS: dict[str, Any] = {"restarts": 0}
GATED = Event("Normal", "ResumeJobs", "jobset is resumed", after_status=True)


def test_default_plan_is_empty() -> None:
    assert Plan().is_empty()


@pytest.mark.parametrize(
    "plan",
    [
        Plan(requeue_after=5.0),
        Plan(status=STATUS),
        Plan(events=(Event("Warning", "InvalidChildJob", "x", after_status=False),)),
        Plan(delete_jobset=True),
        Plan(pvcs_to_create=({"metadata": {"name": "data-js"}},)),
    ],
    ids=["a requeue", "a status write", "an immediate event", "a jobset delete", "a pvc"],
)
def test_any_content_makes_a_plan_non_empty(plan: Plan) -> None:
    assert not plan.is_empty()


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("negative requeue", {"requeue_after": -1.0}, "negative"),
    ("completed and failed", {"status": STATUS, "completed": True, "failed": True}, "both"),
    ("completed without status", {"completed": True}, "status write"),
    (
        "deadline exceeded without the failure",
        {"status": STATUS, "deadline_exceeded": True},
        "counted with the failure",
    ),
    ("gated event without status", {"events": (GATED,)}, "status write"),
    ("resourceVersion without status", {"status_resource_version": "7"}, "without a status"),
    (
        "two patches of one job",
        {
            "jobs_to_patch": (
                JobPatch("a", "u", "1", {"spec": {"suspend": True}}, reason="suspend"),
                JobPatch("a", "u", "1", {"spec": {"suspend": False}}, reason="resume"),
            )
        },
        "more than one patch",
    ),
    (
        "one name created twice",
        {"jobs_to_create": ({"metadata": {"name": "a"}}, {"metadata": {"name": "a"}})},
        "created twice",
    ),
]


@pytest.mark.parametrize(
    ("fields", "message"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_invalid_plans_cannot_be_built(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Plan(**fields)


def test_job_delete_needs_name_and_uid() -> None:
    with pytest.raises(ValueError, match="uid"):
        JobDelete("a", "")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": ""}, "name"),
        ({"patch": {}}, "empty patch"),
        ({"reason": "scale"}, "unknown reason"),
        ({"reason": "elastic+scale"}, "unknown reason"),
    ],
    ids=["no name", "empty patch", "unknown reason", "unknown second reason"],
)
def test_job_patch_validation(fields: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {
        "name": "a",
        "uid": "u",
        "resource_version": "1",
        "patch": {"spec": {"suspend": True}},
        "reason": "suspend",
    }
    with pytest.raises(ValueError, match=message):
        JobPatch(**{**base, **fields})


def test_combined_patch_reason_is_accepted() -> None:
    assert JobPatch("a", "u", "1", {"spec": {}}, reason="elastic+resume").reason == "elastic+resume"


@pytest.mark.parametrize(
    ("type_", "reason"), [("Error", "X"), ("Normal", "")], ids=["bad type", "empty reason"]
)
def test_event_validation(type_: Any, reason: str) -> None:
    with pytest.raises(ValueError, match="event"):
        Event(type_, reason, "note", after_status=False)


def test_the_write_order_names_every_kind_of_child_write_once() -> None:
    assert WRITE_ORDER == (
        WritePhase.DELETE_JOBS,
        WritePhase.DELETE_SCHEDULING,
        WritePhase.CREATE_SERVICE,
        WritePhase.CREATE_PVCS,
        WritePhase.CREATE_WORKLOAD,
        WritePhase.CREATE_POD_GROUPS,
        WritePhase.PATCH_SCHEDULING,
        WritePhase.CREATE_JOBS,
        WritePhase.PATCH_JOBS,
    )
    assert sorted(phase.value for phase in WRITE_ORDER) == sorted(p.value for p in WritePhase)
    fields = set(Plan.__dataclass_fields__)
    assert all(phase.value in fields for phase in WritePhase), "a phase names the field it writes"
