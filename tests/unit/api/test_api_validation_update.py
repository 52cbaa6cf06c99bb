"""UPDATE validation (docs/behaviour.md#validation-update and the CRD's transition rules): what
may change, what may not, and the messages for each refusal."""

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jobset_controller.api import FeatureGates, JobSet, validate_update

Path = tuple[str | int, ...]
Patch = Mapping[Path, Any]
Expected = list[tuple[str, str, str]]  # (field path, error type, message substring)

RJ0: Path = ("spec", "replicatedJobs", 0)
RJ1: Path = ("spec", "replicatedJobs", 1)
JOB1: Path = (*RJ1, "template", "spec")
POD_TEMPLATE1: Path = (*JOB1, "template")
POD1: Path = (*POD_TEMPLATE1, "spec")

ELASTIC = FeatureGates(elastic_job_set=True)
RESOURCES = FeatureGates(mutable_pod_resources_for_suspended_job_sets=True)
DEADLINE = FeatureGates(active_deadline_seconds=True)
IMMUTABLE: Expected = [("spec.replicatedJobs", "Invalid", "field is immutable")]
CEL_IMMUTABLE = "Value is immutable"


def condition(type_: str, status: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "lastTransitionTime": "2024-05-01T10:00:00Z",
        "reason": "R",
        "message": "m",
    }


SCALE_WORKERS: Patch = {(*JOB1, "parallelism"): 8, (*JOB1, "completions"): 8}
KUEUE_EDITS: Patch = {
    (*POD_TEMPLATE1, "metadata"): {"labels": {"kueue": "yes"}, "annotations": {"a": "b"}},
    (*POD1, "nodeSelector"): {"pool": "tpu"},
    (*POD1, "tolerations"): [{"key": "tpu", "operator": "Exists"}],
    (*POD1, "schedulingGates"): [{"name": "kueue.x-k8s.io/admission"}],
}
RESIZED: Patch = {
    (*POD1, "containers", 0, "resources"): {
        "requests": {"cpu": "2", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "4"},
    }
}
SUSPENDED_WITH_INIT: Patch = {
    ("spec", "suspend"): True,
    (*POD1, "initContainers"): [{"name": "init", "image": "busybox"}],
    (*POD1, "resourceClaims"): [{"name": "gpu", "resourceClaimName": "gpu"}],
    (*POD1, "containers", 0, "resources"): {"claims": [{"name": "gpu"}]},
}
WITH_CLAIM: Patch = {
    ("spec", "volumeClaimPolicies"): [{"templates": [{"metadata": {"name": "data"}}]}],
    (*RJ0, "template", "spec", "template", "spec", "containers", 0, "volumeMounts"): [
        {"name": "data", "mountPath": "/data"}
    ],
}

# (old patch applied before admission, new patch applied to the admitted old wire, gates, errors)
CASES = [
    # --- replicatedJobs are immutable ---
    pytest.param({}, {(*RJ1, "replicas"): 3}, None, IMMUTABLE, id="replicas changed"),
    pytest.param(
        {},
        {(*POD1, "containers", 0, "image"): "ubuntu"},
        None,
        IMMUTABLE,
        id="container image changed",
    ),
    pytest.param({}, {(*RJ1, "groupName"): "other"}, None, IMMUTABLE, id="groupName changed"),
    pytest.param({}, {(*RJ1, "name"): "renamed"}, None, IMMUTABLE, id="replicatedJob renamed"),
    pytest.param(
        {},
        {("spec", "replicatedJobs", 2): {"name": "extra", "template": {}}},
        None,
        IMMUTABLE,
        id="replicatedJob added",
    ),
    pytest.param({}, {RJ1: ...}, None, IMMUTABLE, id="replicatedJob removed"),
    # --- managedBy is immutable ---
    pytest.param(
        {},
        {("spec", "managedBy"): "acme.io/ctl"},
        None,
        [("spec.managedBy", "Invalid", "field is immutable")],
        id="managedBy set after creation",
    ),
    pytest.param(
        {("spec", "managedBy"): "acme.io/ctl"},
        {("spec", "managedBy"): ...},
        None,
        [("spec.managedBy", "Invalid", "field is immutable")],
        id="managedBy removed",
    ),
    # --- ElasticJobSet ---
    pytest.param({}, SCALE_WORKERS, None, IMMUTABLE, id="scaling without the Elastic gate"),
    pytest.param({}, SCALE_WORKERS, ELASTIC, [], id="scaling an Indexed replicatedJob"),
    pytest.param(
        {},
        {(*JOB1, "parallelism"): 0, (*JOB1, "completions"): 0},
        ELASTIC,
        [
            (
                "spec.replicatedJobs[1].template.spec.parallelism",
                "Invalid",
                "parallelism must be >= 1",
            ),
            (
                "spec.replicatedJobs[1].template.spec.completions",
                "Invalid",
                "completions must be >= 1",
            ),
        ],
        id="scaling to zero",
    ),
    pytest.param(
        {},
        {(*JOB1, "parallelism"): 8},
        ELASTIC,
        [
            (
                "spec.replicatedJobs[1].template.spec.completions",
                "Invalid",
                "completions must be equal to parallelism for Elastic Indexed Jobs",
            )
        ],
        id="scaling parallelism alone",
    ),
    pytest.param(
        {("status", "conditions"): [condition("Completed", "True")]},
        SCALE_WORKERS,
        ELASTIC,
        [
            (
                "spec.replicatedJobs[1].template.spec",
                "Forbidden",
                "Cannot mutate parallelism or completions when JobSet is in a terminal state "
                "(Completed or Failed)",
            )
        ],
        id="scaling a completed JobSet",
    ),
    pytest.param(
        {("status", "conditions"): [condition("Failed", "True")]},
        SCALE_WORKERS,
        ELASTIC,
        [("spec.replicatedJobs[1].template.spec", "Forbidden", "terminal state")],
        id="scaling a failed JobSet",
    ),
    pytest.param(
        {("status", "conditions"): [condition("Completed", "False")]},
        SCALE_WORKERS,
        ELASTIC,
        [],
        id="a False Completed condition is not terminal",
    ),
    pytest.param(
        {(*JOB1, "completionMode"): "NonIndexed"},
        SCALE_WORKERS,
        ELASTIC,
        IMMUTABLE,
        id="scaling a NonIndexed replicatedJob",
    ),
    pytest.param(
        {},
        {**SCALE_WORKERS, (*POD1, "containers", 0, "image"): "ubuntu"},
        ELASTIC,
        IMMUTABLE,
        id="scaling does not unfreeze the rest of the template",
    ),
    # --- suspended carve-out ---
    pytest.param(
        {("spec", "suspend"): True}, KUEUE_EDITS, None, [], id="Kueue edits while suspended"
    ),
    pytest.param(
        {},
        {**KUEUE_EDITS, ("spec", "suspend"): True},
        None,
        [],
        id="Kueue edits while being suspended",
    ),
    pytest.param(
        {("spec", "suspend"): True},
        {**KUEUE_EDITS, ("spec", "suspend"): False},
        None,
        [],
        id="Kueue edits while being resumed",
    ),
    pytest.param({}, KUEUE_EDITS, None, IMMUTABLE, id="Kueue edits while running"),
    pytest.param(
        {("spec", "suspend"): True},
        {(*POD1, "containers", 0, "image"): "ubuntu"},
        None,
        IMMUTABLE,
        id="other pod template fields stay frozen while suspended",
    ),
    # --- MutablePodResourcesForSuspendedJobSets (KEP-1150) ---
    pytest.param(
        {("spec", "suspend"): True},
        RESIZED,
        RESOURCES,
        [],
        id="container requests and limits change while suspended with the gate",
    ),
    pytest.param(
        {},
        {**RESIZED, ("spec", "suspend"): True},
        RESOURCES,
        [],
        id="container resources change while being suspended with the gate",
    ),
    pytest.param(
        SUSPENDED_WITH_INIT,
        {(*POD1, "initContainers", 0, "resources"): {"requests": {"memory": "1Gi"}}},
        RESOURCES,
        [],
        id="init container resources change while suspended with the gate",
    ),
    pytest.param(
        {("spec", "suspend"): True},
        RESIZED,
        None,
        IMMUTABLE,
        id="container resources stay frozen while suspended without the gate",
    ),
    pytest.param({}, RESIZED, RESOURCES, IMMUTABLE, id="container resources frozen while running"),
    pytest.param(
        SUSPENDED_WITH_INIT,
        {(*POD1, "containers", 0, "resources", "claims"): [{"name": "other"}]},
        RESOURCES,
        IMMUTABLE,
        id="resource claims stay frozen while suspended with the gate",
    ),
    pytest.param(
        SUSPENDED_WITH_INIT,
        {(*POD1, "initContainers", 0, "image"): "ubuntu"},
        RESOURCES,
        IMMUTABLE,
        id="init container image stays frozen while suspended with the gate",
    ),
    pytest.param(
        {("spec", "suspend"): True},
        {**RESIZED, (*POD1, "containers", 1): {"name": "sidecar", "image": "busybox"}},
        RESOURCES,
        IMMUTABLE,
        id="a container added with a resize is refused",
    ),
    pytest.param(
        {("spec", "suspend"): True},
        {**RESIZED, (*POD1, "containers", 0, "name"): "renamed"},
        RESOURCES,
        IMMUTABLE,
        id="a renamed container has no resources to take",
    ),
    # --- mutable fields and semantic equality ---
    pytest.param(
        {},
        {
            ("spec", "suspend"): True,
            ("spec", "ttlSecondsAfterFinished"): 30,
            ("metadata", "labels"): {"a": "b"},
            ("spec", "coordinator"): {"replicatedJob": "leader"},
        },
        None,
        [],
        id="suspend, ttl, labels and coordinator are mutable",
    ),
    *(
        pytest.param(
            old,
            {("spec", "activeDeadlineSeconds"): new},
            gates,
            [],
            id=f"activeDeadlineSeconds {change} on a running JobSet, gate {gate_name}",
        )
        for change, old, new in (
            ("raised", {("spec", "activeDeadlineSeconds"): 60}, 3600),
            ("lowered", {("spec", "activeDeadlineSeconds"): 3600}, 60),
            ("added", {}, 60),
            ("removed", {("spec", "activeDeadlineSeconds"): 60}, ...),
        )
        for gate_name, gates in (("off", None), ("on", DEADLINE))
    ),
    pytest.param({}, {(*POD1, "nodeSelector"): {}}, None, [], id="empty map equals absent"),
    pytest.param({}, {(*RJ0, "replicas"): ...}, None, [], id="absent replicas equals default 1"),
    pytest.param(
        {("metadata", "name"): "Bad_Name", (*RJ0, "groupName"): "Bad"},
        {},
        None,
        [],
        id="create-time checks are not repeated",
    ),
    # --- CRD transition rules ---
    pytest.param(
        {},
        {("spec", "network", "publishNotReadyAddresses"): False},
        None,
        [("spec.network", "Invalid", CEL_IMMUTABLE)],
        id="network changed",
    ),
    pytest.param(
        {},
        {("spec", "successPolicy", "operator"): "Any"},
        None,
        [("spec.successPolicy", "Invalid", CEL_IMMUTABLE)],
        id="successPolicy changed",
    ),
    pytest.param(
        {("spec", "failurePolicy"): {"maxRestarts": 1}},
        {("spec", "failurePolicy", "maxRestarts"): 2},
        None,
        [("spec.failurePolicy", "Invalid", CEL_IMMUTABLE)],
        id="failurePolicy changed",
    ),
    pytest.param(
        {("spec", "failurePolicy"): {"maxRestarts": 1}},
        {("spec", "failurePolicy", "restartStrategy"): ...},
        None,
        [],
        id="failurePolicy without restartStrategy gets the CRD default",
    ),
    pytest.param(
        {},
        {("spec", "failurePolicy"): {"maxRestarts": 1}},
        None,
        [],
        id="failurePolicy added when absent",
    ),
    pytest.param(
        {},
        {("spec", "startupPolicy", "startupPolicyOrder"): "InOrder"},
        None,
        [("spec.startupPolicy", "Invalid", CEL_IMMUTABLE)],
        id="startupPolicy changed",
    ),
    pytest.param(
        WITH_CLAIM,
        {("spec", "volumeClaimPolicies", 0, "retentionPolicy", "whenDeleted"): "Retain"},
        None,
        [("spec.volumeClaimPolicies", "Invalid", CEL_IMMUTABLE)],
        id="volumeClaimPolicies changed",
    ),
    pytest.param(
        {(*RJ1, "dependsOn"): [{"name": "leader", "status": "Ready"}]},
        {(*RJ1, "dependsOn", 0, "status"): "Complete"},
        None,
        [
            ("spec.replicatedJobs[1].dependsOn", "Invalid", CEL_IMMUTABLE),
            ("spec.replicatedJobs", "Invalid", "field is immutable"),
        ],
        id="dependsOn changed",
    ),
]


@pytest.mark.parametrize(("old_patch", "new_patch", "features", "expected"), CASES)
def test_update(
    admitted: Callable[[Patch], JobSet],
    apply_patch: Callable[[dict[str, Any], Patch], dict[str, Any]],
    old_patch: Patch,
    new_patch: Patch,
    features: FeatureGates | None,
    expected: Expected,
) -> None:
    old = admitted(old_patch)
    new = JobSet.model_validate(apply_patch(old.to_dict(), new_patch))
    errors = validate_update(old, new, features=features or FeatureGates())
    got = [(error.field, error.type, error.message) for error in errors]
    assert len(got) == len(expected), got
    for (field, type_, message), (want_field, want_type, want_message) in zip(
        got, expected, strict=True
    ):
        assert (field, type_) == (want_field, want_type), got
        assert want_message in message, got


def test_immutable_errors_carry_the_new_value(
    admitted: Callable[[Patch], JobSet],
    apply_patch: Callable[[dict[str, Any], Patch], dict[str, Any]],
) -> None:
    old = admitted({})
    new = JobSet.model_validate(
        apply_patch(old.to_dict(), {("spec", "managedBy"): "acme.io/ctl", (*RJ1, "replicas"): 3})
    )
    rjobs_error, managed_by_error = validate_update(old, new)
    assert rjobs_error.bad_value == new.to_dict()["spec"]["replicatedJobs"]
    assert (
        str(managed_by_error) == 'spec.managedBy: Invalid value: "acme.io/ctl": field is immutable'
    )


def test_update_does_not_mutate_either_object(
    admitted: Callable[[Patch], JobSet],
    apply_patch: Callable[[dict[str, Any], Patch], dict[str, Any]],
) -> None:
    old = admitted({("spec", "suspend"): True})
    new = JobSet.model_validate(apply_patch(old.to_dict(), {**KUEUE_EDITS, **SCALE_WORKERS}))
    old_before, new_before = old.to_dict(), new.to_dict()
    validate_update(old, new, features=ELASTIC)
    assert (old.to_dict(), new.to_dict()) == (old_before, new_before)
