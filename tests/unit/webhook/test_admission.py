"""AdmissionReview handling without a server: patches, denials, and what is let through."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.webhook.admission import mutate, validate


def review(operation: str, obj: Any, old: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": operation, "object": obj, "oldObject": old},
    }


def jobset(**spec: Any) -> dict[str, Any]:
    pod = {"containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns"},
        "spec": {
            "replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": pod}}}}],
            **spec,
        },
    }


def test_create_is_answered_with_one_patch_setting_the_defaulted_spec() -> None:
    answer = mutate(review("CREATE", jobset()))["response"]
    assert answer["uid"] == "u-1"
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    [op] = orjson.loads(base64.b64decode(answer["patch"]))
    assert (op["op"], op["path"]) == ("add", "/spec")
    assert op["value"]["successPolicy"] == {"operator": "All"}
    assert op["value"]["replicatedJobs"][0]["replicas"] == 1


def test_updates_are_never_defaulted() -> None:
    answer = mutate(review("UPDATE", jobset(), jobset()))["response"]
    assert answer == {"uid": "u-1", "allowed": True}


def test_an_already_defaulted_jobset_needs_no_patch() -> None:
    first = mutate(review("CREATE", jobset()))["response"]
    [op] = orjson.loads(base64.b64decode(first["patch"]))
    defaulted = {**jobset(), "spec": op["value"]}
    assert "patch" not in mutate(review("CREATE", defaulted))["response"]


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({"kind": "Pod"}, id="not a JobSet"),
        pytest.param("not an object", id="not an object"),
        pytest.param(None, id="no object"),
        pytest.param(
            jobset(replicatedJobs=[{"name": "w", "replicas": -1, "template": {}}]),
            id="negative replicas",
        ),
        pytest.param(
            jobset(
                replicatedJobs=[
                    {"name": "a", "template": {}},
                    {"name": "b", "template": {}, "dependsOn": [{"name": "a", "status": "Done"}]},
                ]
            ),
            id="unknown dependsOn status",
        ),
        pytest.param(
            jobset(volumeClaimPolicies=[{"templates": []} for _ in range(51)]),
            id="51 volumeClaimPolicies",
        ),
        pytest.param(jobset(replicatedJobs="workers"), id="wrong type"),
        pytest.param(
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": []},
            id="metadata of the wrong type",
        ),
    ],
)
def test_mutating_lets_what_it_cannot_read_through_unchanged_for_the_schema_to_judge(
    obj: Any,
) -> None:
    answer = mutate(review("CREATE", obj))["response"]
    assert answer == {"uid": "u-1", "allowed": True}


def test_the_validating_step_still_answers_an_unreadable_object_with_400() -> None:
    answer = validate(review("CREATE", {"kind": "Pod"}), features=FeatureGates())["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 400


def test_invalid_create_is_a_422_with_one_cause_per_error() -> None:
    body = jobset(successPolicy={"operator": "All", "targetReplicatedJobs": ["nope"]})
    body["spec"]["replicatedJobs"][0]["groupName"] = "Not_A_Label"
    answer = validate(review("CREATE", body), features=FeatureGates())["response"]
    status = answer["status"]
    assert answer["allowed"] is False
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('JobSet.jobset.x-k8s.io "js" is invalid: [')
    fields = [cause["field"] for cause in status["details"]["causes"]]
    assert fields == [
        "spec.replicatedJobs[0].groupName",
        "spec.successPolicy.targetReplicatedJobs[0]",
    ]


def test_a_repeated_error_is_one_cause_each_but_named_once_in_the_message() -> None:
    """As apimachinery's NewInvalid (found by the differential tests, tests/differential): an
    invalid replicatedJob name fails the Job name and the pod name check with the same text."""
    body = jobset()
    body["spec"]["replicatedJobs"][0]["name"] = "Bad_Name"
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = 1
    status = validate(review("CREATE", body), features=FeatureGates())["response"]["status"]
    causes = status["details"]["causes"]
    assert len(causes) == 2
    assert causes[0] == causes[1]
    assert status["message"] == (
        f'JobSet.jobset.x-k8s.io "js" is invalid: {causes[0]["field"]}: {causes[0]["message"]}'
    )


def test_valid_create_and_delete_are_allowed() -> None:
    assert validate(review("CREATE", jobset()), features=FeatureGates())["response"]["allowed"]
    assert validate(review("DELETE", None, jobset()), features=FeatureGates())["response"][
        "allowed"
    ]


def test_update_changing_replicas_is_denied_as_immutable() -> None:
    old, new = jobset(), jobset()
    new["spec"]["replicatedJobs"][0]["replicas"] = 3
    answer = validate(review("UPDATE", new, old), features=FeatureGates())["response"]
    assert answer["allowed"] is False
    assert "field is immutable" in answer["status"]["message"]


@pytest.mark.parametrize(
    ("before", "after"),
    [(60, 3600), (3600, 60), (None, 60), (60, None)],
    ids=["raised", "lowered", "added", "removed"],
)
@pytest.mark.parametrize(
    "gates", [FeatureGates(), FeatureGates(active_deadline_seconds=True)], ids=["gate off", "on"]
)
def test_active_deadline_changes_on_a_running_jobset_are_allowed(
    before: int | None, after: int | None, gates: FeatureGates
) -> None:
    def running(seconds: int | None) -> dict[str, Any]:
        body = jobset() if seconds is None else jobset(activeDeadlineSeconds=seconds)
        body["status"] = {"startTime": "2025-06-01T12:00:00Z", "restarts": 0}
        return body

    answer = validate(review("UPDATE", running(after), running(before)), features=gates)
    assert answer["response"]["allowed"] is True


def test_the_defaulting_patch_keeps_active_deadline_with_the_gate_off() -> None:
    answer = mutate(review("CREATE", jobset(activeDeadlineSeconds=30)))["response"]
    [op] = orjson.loads(base64.b64decode(answer["patch"]))
    assert op["value"]["activeDeadlineSeconds"] == 30
    assert validate(review("CREATE", jobset(activeDeadlineSeconds=30)), features=FeatureGates())[
        "response"
    ]["allowed"]
