"""Defaulting: every default, only when absent, marked set, idempotent, pure.

See docs/behaviour.md#defaults.
"""

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jobset_controller.api import JobSet, apply_crd_defaults, default_jobset

Path = tuple[str | int, ...]
Patch = Mapping[Path, Any]

RJ0: Path = ("spec", "replicatedJobs", 0)
JOB0: Path = (*RJ0, "template", "spec")
POD0: Path = (*JOB0, "template", "spec")


def _at(d: Any, path: Path) -> Any:
    for key in path:
        d = d[key]
    return d


# (id, patch applied to the valid JobSet, path read after defaulting, expected value)
DEFAULTS: list[tuple[str, Patch, Path, Any]] = [
    ("replicas 1 when absent (CRD)", {(*RJ0, "replicas"): ...}, (*RJ0, "replicas"), 1),
    ("replicas kept when set, even 0", {(*RJ0, "replicas"): 0}, (*RJ0, "replicas"), 0),
    ("groupName default when absent (CRD)", {}, (*RJ0, "groupName"), "default"),
    ("groupName kept when set", {(*RJ0, "groupName"): "g"}, (*RJ0, "groupName"), "g"),
    (
        "restartStrategy Recreate when failurePolicy present (CRD)",
        {("spec", "failurePolicy"): {"maxRestarts": 1}},
        ("spec", "failurePolicy", "restartStrategy"),
        "Recreate",
    ),
    (
        "restartStrategy kept when set",
        {("spec", "failurePolicy"): {"restartStrategy": "BlockingRecreate"}},
        ("spec", "failurePolicy", "restartStrategy"),
        "BlockingRecreate",
    ),
    ("successPolicy operator All", {}, ("spec", "successPolicy"), {"operator": "All"}),
    (
        "successPolicy kept when set",
        {("spec", "successPolicy"): {"operator": "Any", "targetReplicatedJobs": ["workers"]}},
        ("spec", "successPolicy"),
        {"operator": "Any", "targetReplicatedJobs": ["workers"]},
    ),
    (
        "startupPolicy AnyOrder",
        {},
        ("spec", "startupPolicy"),
        {"startupPolicyOrder": "AnyOrder"},
    ),
    (
        "startupPolicy kept when set",
        {("spec", "startupPolicy"): {"startupPolicyOrder": "InOrder"}},
        ("spec", "startupPolicy"),
        {"startupPolicyOrder": "InOrder"},
    ),
    ("completionMode Indexed", {}, (*JOB0, "completionMode"), "Indexed"),
    (
        "completionMode kept when set",
        {(*JOB0, "completionMode"): "NonIndexed"},
        (*JOB0, "completionMode"),
        "NonIndexed",
    ),
    ("restartPolicy OnFailure when absent", {}, (*POD0, "restartPolicy"), "OnFailure"),
    (
        "restartPolicy OnFailure when empty",
        {(*POD0, "restartPolicy"): ""},
        (*POD0, "restartPolicy"),
        "OnFailure",
    ),
    (
        "restartPolicy kept when set",
        {(*POD0, "restartPolicy"): "Never"},
        (*POD0, "restartPolicy"),
        "Never",
    ),
    (
        "network created with DNS hostnames and not-ready addresses",
        {},
        ("spec", "network"),
        {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
    ),
    (
        "network sub-defaults fill only what is absent",
        {("spec", "network"): {"enableDNSHostnames": False, "subdomain": "net"}},
        ("spec", "network"),
        {"enableDNSHostnames": False, "subdomain": "net", "publishNotReadyAddresses": True},
    ),
    (
        "failure policy rule names failurePolicyRule<index>",
        {
            ("spec", "failurePolicy"): {
                "rules": [
                    {"action": "FailJobSet"},
                    {"name": "mine", "action": "FailJobSet"},
                    {"name": "", "action": "RestartJobSet"},
                ]
            }
        },
        ("spec", "failurePolicy", "rules"),
        [
            {"name": "failurePolicyRule0", "action": "FailJobSet"},
            {"name": "mine", "action": "FailJobSet"},
            {"name": "failurePolicyRule2", "action": "RestartJobSet"},
        ],
    ),
    (
        "retentionPolicy Delete when absent (webhook)",
        {("spec", "volumeClaimPolicies"): [{"templates": []}]},
        ("spec", "volumeClaimPolicies", 0, "retentionPolicy"),
        {"whenDeleted": "Delete"},
    ),
    (
        "whenDeleted Delete when retentionPolicy is empty (CRD)",
        {("spec", "volumeClaimPolicies"): [{"retentionPolicy": {}}]},
        ("spec", "volumeClaimPolicies", 0, "retentionPolicy"),
        {"whenDeleted": "Delete"},
    ),
    (
        "whenDeleted kept when set",
        {("spec", "volumeClaimPolicies"): [{"retentionPolicy": {"whenDeleted": "Retain"}}]},
        ("spec", "volumeClaimPolicies", 0, "retentionPolicy"),
        {"whenDeleted": "Retain"},
    ),
]


@pytest.mark.parametrize(
    ("patch", "path", "expected"),
    [pytest.param(patch, path, expected, id=id_) for id_, patch, path, expected in DEFAULTS],
)
def test_default_is_materialised_in_the_dump(
    patched: Callable[[Patch], dict[str, Any]], patch: Patch, path: Path, expected: Any
) -> None:
    js = JobSet.model_validate(patched(patch))
    assert _at(default_jobset(js).to_dict(), path) == expected


def test_defaulting_a_minimal_jobset_gives_the_admitted_shape() -> None:
    js = JobSet.model_validate(
        {"metadata": {"name": "js"}, "spec": {"replicatedJobs": [{"name": "w", "template": {}}]}}
    )
    assert default_jobset(js).to_dict() == {
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "groupName": "default",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "completionMode": "Indexed",
                            "template": {"spec": {"restartPolicy": "OnFailure"}},
                        }
                    },
                }
            ],
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        },
    }


def test_a_jobset_without_spec_gets_the_policy_defaults() -> None:
    assert default_jobset(JobSet()).to_dict() == {
        "spec": {
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        }
    }


def test_defaulting_is_idempotent(patched: Callable[[Patch], dict[str, Any]]) -> None:
    d = patched(
        {
            ("spec", "failurePolicy"): {"rules": [{"action": "FailJobSet"}]},
            ("spec", "volumeClaimPolicies"): [{"templates": [{"metadata": {"name": "data"}}]}],
        }
    )
    once = default_jobset(JobSet.model_validate(d))
    twice = default_jobset(once)
    assert twice.to_dict() == once.to_dict()
    assert default_jobset(JobSet.model_validate(once.to_dict())).to_dict() == once.to_dict()


def test_defaulting_never_mutates_its_input(patched: Callable[[Patch], dict[str, Any]]) -> None:
    d = patched({("spec", "failurePolicy"): {"rules": [{"action": "FailJobSet"}]}})
    js = JobSet.model_validate(d)
    before = copy.deepcopy(js.to_dict())
    default_jobset(js)
    apply_crd_defaults(js)
    assert js.to_dict() == before == d
    assert js.spec.network is None
    assert js.spec.failure_policy is not None
    assert js.spec.failure_policy.rules[0].name == ""


def test_crd_defaults_alone_leave_webhook_defaults_out(
    patched: Callable[[Patch], dict[str, Any]],
) -> None:
    d = patched({("spec", "failurePolicy"): {"rules": [{"action": "FailJobSet"}]}})
    out = apply_crd_defaults(JobSet.model_validate(d)).to_dict()
    assert out["spec"]["replicatedJobs"][0]["groupName"] == "default"
    assert out["spec"]["failurePolicy"] == {
        "restartStrategy": "Recreate",
        "rules": [{"action": "FailJobSet"}],
    }
    assert "successPolicy" not in out["spec"]
    assert "completionMode" not in out["spec"]["replicatedJobs"][0]["template"]["spec"]


def test_unknown_fields_survive_defaulting(patched: Callable[[Patch], dict[str, Any]]) -> None:
    d = patched({("spec", "futureField"): {"x": 1}, (*POD0, "futurePodField"): [1]})
    out = default_jobset(JobSet.model_validate(d)).to_dict()
    assert out["spec"]["futureField"] == {"x": 1}
    assert _at(out, (*POD0, "futurePodField")) == [1]
