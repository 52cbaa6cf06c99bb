"""The models: wire names, defaults that read but are not dumped, CRD enums and bounds, lossless."""

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from jobset_controller.api import (
    Condition,
    Container,
    Coordinator,
    DependsOn,
    FailurePolicy,
    FailurePolicyRule,
    JobSet,
    JobSetSpec,
    JobSetStatus,
    JobSpec,
    Network,
    ObjectMeta,
    PodSpec,
    ReplicatedJob,
    ReplicatedJobStatus,
    RestartStrategy,
    RetentionPolicy,
    StartupPolicy,
    SuccessPolicy,
    Toleration,
    VolumeClaimPolicy,
    VolumeMount,
)

# Every field of docs/behaviour.md#spec and #status (and the template fields we type): model,
# attribute, wire name. The wire names are the contract.
WIRE_NAMES: list[tuple[type[BaseModel], str, str]] = [
    (JobSet, "api_version", "apiVersion"),
    (JobSet, "kind", "kind"),
    (JobSet, "metadata", "metadata"),
    (JobSet, "spec", "spec"),
    (JobSet, "status", "status"),
    (JobSetSpec, "replicated_jobs", "replicatedJobs"),
    (JobSetSpec, "network", "network"),
    (JobSetSpec, "success_policy", "successPolicy"),
    (JobSetSpec, "failure_policy", "failurePolicy"),
    (JobSetSpec, "startup_policy", "startupPolicy"),
    (JobSetSpec, "suspend", "suspend"),
    (JobSetSpec, "coordinator", "coordinator"),
    (JobSetSpec, "managed_by", "managedBy"),
    (JobSetSpec, "ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    (JobSetSpec, "active_deadline_seconds", "activeDeadlineSeconds"),
    (JobSetSpec, "volume_claim_policies", "volumeClaimPolicies"),
    (ReplicatedJob, "name", "name"),
    (ReplicatedJob, "group_name", "groupName"),
    (ReplicatedJob, "template", "template"),
    (ReplicatedJob, "replicas", "replicas"),
    (ReplicatedJob, "depends_on", "dependsOn"),
    (DependsOn, "name", "name"),
    (DependsOn, "status", "status"),
    (Network, "enable_dns_hostnames", "enableDNSHostnames"),
    (Network, "subdomain", "subdomain"),
    (Network, "publish_not_ready_addresses", "publishNotReadyAddresses"),
    (SuccessPolicy, "operator", "operator"),
    (SuccessPolicy, "target_replicated_jobs", "targetReplicatedJobs"),
    (FailurePolicy, "max_restarts", "maxRestarts"),
    (FailurePolicy, "restart_strategy", "restartStrategy"),
    (FailurePolicy, "rules", "rules"),
    (FailurePolicyRule, "name", "name"),
    (FailurePolicyRule, "action", "action"),
    (FailurePolicyRule, "on_job_failure_reasons", "onJobFailureReasons"),
    (FailurePolicyRule, "on_job_failure_message_patterns", "onJobFailureMessagePatterns"),
    (FailurePolicyRule, "target_replicated_jobs", "targetReplicatedJobs"),
    (StartupPolicy, "startup_policy_order", "startupPolicyOrder"),
    (Coordinator, "replicated_job", "replicatedJob"),
    (Coordinator, "job_index", "jobIndex"),
    (Coordinator, "pod_index", "podIndex"),
    (VolumeClaimPolicy, "templates", "templates"),
    (VolumeClaimPolicy, "retention_policy", "retentionPolicy"),
    (RetentionPolicy, "when_deleted", "whenDeleted"),
    (JobSetStatus, "conditions", "conditions"),
    (JobSetStatus, "restarts", "restarts"),
    (JobSetStatus, "restarts_count_towards_max", "restartsCountTowardsMax"),
    (JobSetStatus, "terminal_state", "terminalState"),
    (JobSetStatus, "replicated_jobs_status", "replicatedJobsStatus"),
    (JobSetStatus, "previous_in_place_restart_attempt", "previousInPlaceRestartAttempt"),
    (JobSetStatus, "current_in_place_restart_attempt", "currentInPlaceRestartAttempt"),
    (JobSetStatus, "execution_attempts", "executionAttempts"),
    (JobSetStatus, "start_time", "startTime"),
    (ReplicatedJobStatus, "job_restarts", "jobRestarts"),
    (ReplicatedJobStatus, "job_restarts_count_towards_max", "jobRestartsCountTowardsMax"),
    (Condition, "observed_generation", "observedGeneration"),
    (Condition, "last_transition_time", "lastTransitionTime"),
    (ObjectMeta, "generate_name", "generateName"),
    (ObjectMeta, "resource_version", "resourceVersion"),
    (ObjectMeta, "creation_timestamp", "creationTimestamp"),
    (ObjectMeta, "deletion_timestamp", "deletionTimestamp"),
    (ObjectMeta, "owner_references", "ownerReferences"),
    (JobSpec, "completion_mode", "completionMode"),
    (JobSpec, "backoff_limit", "backoffLimit"),
    (JobSpec, "pod_replacement_policy", "podReplacementPolicy"),
    (PodSpec, "node_selector", "nodeSelector"),
    (PodSpec, "scheduling_gates", "schedulingGates"),
    (PodSpec, "restart_policy", "restartPolicy"),
    (PodSpec, "init_containers", "initContainers"),
    (Container, "volume_mounts", "volumeMounts"),
    (VolumeMount, "mount_path", "mountPath"),
    (Toleration, "toleration_seconds", "tolerationSeconds"),
]


@pytest.mark.parametrize(
    ("model", "attribute", "wire_name"),
    WIRE_NAMES,
    ids=[f"{model.__name__}.{wire}" for model, _, wire in WIRE_NAMES],
)
def test_every_field_has_its_contract_wire_name(
    model: type[BaseModel], attribute: str, wire_name: str
) -> None:
    assert model.model_fields[attribute].alias == wire_name


def test_defaults_read_right_but_are_not_dumped() -> None:
    d = {"name": "w", "template": {}}
    rjob = ReplicatedJob.model_validate(d)
    assert (rjob.replicas, rjob.group_name, rjob.depends_on) == (1, "default", None)
    assert rjob.template.spec.template.spec.containers == []
    assert rjob.to_dict() == d
    policy = FailurePolicy.model_validate({})
    assert (policy.restart_strategy, policy.max_restarts, policy.rules) == (
        RestartStrategy.RECREATE,
        0,
        [],
    )
    assert policy.to_dict() == {}


def test_absent_replicated_jobs_read_as_empty_list() -> None:
    js = JobSet.model_validate({"metadata": {"name": "js"}})
    assert js.spec.replicated_jobs == []
    assert js.status.conditions == []
    assert js.to_dict() == {"metadata": {"name": "js"}}


def test_python_names_and_wire_names_both_build_a_model() -> None:
    by_attribute = ReplicatedJob(name="w", group_name="g", template={})
    by_wire_name = ReplicatedJob.model_validate({"name": "w", "groupName": "g", "template": {}})
    assert (
        by_attribute.to_dict()
        == by_wire_name.to_dict()
        == {
            "name": "w",
            "groupName": "g",
            "template": {},
        }
    )


def test_enums_dump_as_plain_strings() -> None:
    policy = FailurePolicy(restart_strategy=RestartStrategy.BLOCKING_RECREATE)
    dumped = policy.to_dict()
    assert dumped == {"restartStrategy": "BlockingRecreate"}
    assert type(dumped["restartStrategy"]) is str


def test_explicit_nulls_of_optional_fields_are_preserved() -> None:
    d = {"name": "w", "template": {"spec": {"parallelism": None, "completionMode": None}}}
    assert ReplicatedJob.model_validate(d).to_dict() == d


def test_assignment_marks_the_field_set_and_is_validated() -> None:
    rjob = ReplicatedJob.model_validate({"name": "w", "template": {}})
    rjob.replicas = 3
    assert rjob.to_dict()["replicas"] == 3
    with pytest.raises(ValidationError):
        rjob.replicas = -1


@pytest.mark.parametrize(
    ("model", "data"),
    [
        pytest.param(FailurePolicy, {"restartStrategy": "Sometimes"}, id="restartStrategy enum"),
        pytest.param(FailurePolicyRule, {"action": "Retry"}, id="failure action enum"),
        pytest.param(SuccessPolicy, {"operator": "Most"}, id="success operator enum"),
        pytest.param(StartupPolicy, {"startupPolicyOrder": "Random"}, id="startup order enum"),
        pytest.param(DependsOn, {"name": "a", "status": "Started"}, id="dependsOn status enum"),
        pytest.param(RetentionPolicy, {"whenDeleted": "Keep"}, id="whenDeleted enum"),
        pytest.param(
            Condition,
            {
                "type": "Completed",
                "status": "Yes",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
                "reason": "R",
                "message": "",
            },
            id="condition status enum",
        ),
        pytest.param(
            ReplicatedJob, {"name": "w", "template": {}, "replicas": -1}, id="replicas minimum 0"
        ),
        pytest.param(JobSetSpec, {"ttlSecondsAfterFinished": -1}, id="ttl minimum 0"),
        pytest.param(JobSetSpec, {"activeDeadlineSeconds": 0}, id="active deadline minimum 1"),
        pytest.param(JobSetSpec, {"activeDeadlineSeconds": -1}, id="active deadline negative"),
        pytest.param(
            ReplicatedJob,
            {
                "name": "w",
                "template": {},
                "dependsOn": [{"name": f"d{i}", "status": "Ready"} for i in range(6)],
            },
            id="dependsOn maxItems 5",
        ),
        pytest.param(
            JobSetSpec, {"volumeClaimPolicies": [{}] * 51}, id="volumeClaimPolicies maxItems 50"
        ),
        pytest.param(ReplicatedJob, {"template": {}}, id="replicatedJob name required"),
        pytest.param(ReplicatedJob, {"name": "w"}, id="replicatedJob template required"),
        pytest.param(SuccessPolicy, {}, id="success operator required"),
        pytest.param(FailurePolicyRule, {"name": "r"}, id="rule action required"),
        pytest.param(Coordinator, {}, id="coordinator replicatedJob required"),
        pytest.param(ReplicatedJobStatus, {"name": "w"}, id="status counters required"),
    ],
)
def test_crd_schema_violations_raise_validation_error(
    model: type[BaseModel], data: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(data)


def test_rule_name_is_optional_because_the_webhook_defaults_it() -> None:
    assert FailurePolicyRule.model_validate({"action": "FailJobSet"}).name == ""


def full_wire(base: dict[str, Any]) -> dict[str, Any]:
    """``base`` extended to touch every typed level, with status, as a controller would read it."""
    d = copy.deepcopy(base)
    d["metadata"].update(
        {
            "uid": "0b6e",
            "resourceVersion": "42",
            "generation": 2,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"team": "ml"},
            "annotations": {"note": "x"},
            "ownerReferences": [{"kind": "Workload", "name": "w", "uid": "1"}],
            "finalizers": ["example.com/f"],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        }
    )
    spec = d["spec"]
    spec.update(
        {
            "network": {"enableDNSHostnames": True, "subdomain": "net"},
            "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["workers"]},
            "failurePolicy": {
                "maxRestarts": 3,
                "rules": [
                    {
                        "name": "r",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "suspend": False,
            "coordinator": {"replicatedJob": "leader"},
            "managedBy": "acme.io/ctl",
            "ttlSecondsAfterFinished": 60,
            "volumeClaimPolicies": [
                {
                    "templates": [
                        {
                            "metadata": {"name": "data", "labels": {"a": "b"}},
                            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
                        }
                    ],
                    "retentionPolicy": {"whenDeleted": "Retain"},
                }
            ],
        }
    )
    pod = spec["replicatedJobs"][1]["template"]["spec"]["template"]
    pod["metadata"] = {"labels": {"app": "w"}}
    pod["spec"].update(
        {
            "nodeSelector": {"pool": "a"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "schedulingGates": [{"name": "kueue"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "busybox"}],
            "priority": 5,
        }
    )
    d["status"] = {
        "conditions": [
            {
                "type": "Suspended",
                "status": "False",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
                "reason": "ResumeJobs",
                "message": "jobset is resumed",
            }
        ],
        "restarts": 0,
        "replicatedJobsStatus": [
            {
                "name": "leader",
                "ready": 1,
                "succeeded": 0,
                "failed": 0,
                "active": 1,
                "suspended": 0,
            }
        ],
    }
    return d


def test_full_jobset_round_trips_unchanged(valid_wire: dict[str, Any]) -> None:
    d = full_wire(valid_wire)
    assert JobSet.model_validate(d).to_dict() == d


@pytest.mark.parametrize(
    "path",
    [
        pytest.param((), id="top level"),
        pytest.param(("metadata",), id="metadata"),
        pytest.param(("spec",), id="spec"),
        pytest.param(("spec", "replicatedJobs", 1), id="replicatedJob"),
        pytest.param(("spec", "replicatedJobs", 1, "template"), id="job template"),
        pytest.param(("spec", "replicatedJobs", 1, "template", "spec"), id="job spec"),
        pytest.param(
            ("spec", "replicatedJobs", 1, "template", "spec", "template", "spec"), id="pod spec"
        ),
        pytest.param(
            ("spec", "replicatedJobs", 1, "template", "spec", "template", "spec", "containers", 0),
            id="container",
        ),
        pytest.param(
            ("spec", "replicatedJobs", 1, "template", "spec", "template", "spec", "tolerations", 0),
            id="toleration",
        ),
        pytest.param(("spec", "failurePolicy", "rules", 0), id="failure policy rule"),
        pytest.param(("spec", "volumeClaimPolicies", 0, "templates", 0), id="pvc template"),
        pytest.param(("spec", "network"), id="network"),
        pytest.param(("status",), id="status"),
        pytest.param(("status", "conditions", 0), id="condition"),
        pytest.param(("status", "replicatedJobsStatus", 0), id="replicatedJob status"),
    ],
)
def test_unknown_fields_survive_at_every_level(
    path: tuple[str | int, ...], valid_wire: dict[str, Any]
) -> None:
    d = full_wire(valid_wire)
    _at(d, path)["someFutureField"] = {"nested": [1, "two", None, {"three": 3.5}]}
    assert JobSet.model_validate(d).to_dict() == d


def test_validation_does_not_change_the_input_dict(valid_wire: dict[str, Any]) -> None:
    d = full_wire(valid_wire)
    before = copy.deepcopy(d)
    JobSet.model_validate(d).to_dict()
    assert d == before


def _at(d: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        d = d[key]
    return d


# --- property: random unknown keys at random depths survive the round trip ------------------

# Dicts whose values are typed as strings; an unknown key there is a type error, not extra data.
_STRING_MAPS = {"labels", "annotations", "nodeSelector"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
# A prefix no field of the API starts with, so the key is always unknown to the models.
unknown_keys = st.text(alphabet="abcdefXYZ019_-./", min_size=0, max_size=8).map(
    lambda suffix: "zz" + suffix
)


def _object_paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of every JSON object in ``value`` that may hold arbitrary extra keys."""
    paths: list[tuple[str | int, ...]] = []
    if isinstance(value, dict):
        if not path or path[-1] not in _STRING_MAPS:
            paths.append(path)
        for key, item in value.items():
            paths += _object_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths += _object_paths(item, (*path, index))
    return paths


# full_wire deep-copies the fixture, so sharing one fixture value across examples is safe.
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_unknown_keys_at_random_depths_round_trip(
    data: st.DataObject, valid_wire: dict[str, Any]
) -> None:
    d = full_wire(valid_wire)
    paths = _object_paths(d)
    insertions = data.draw(
        st.lists(st.tuples(st.sampled_from(paths), unknown_keys, json_values), max_size=6)
    )
    for path, key, value in insertions:
        _at(d, path)[key] = value
    assert JobSet.model_validate(d).to_dict() == d


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "suspend"), "yes"),
        (("spec", "suspend"), 1),
        (("spec", "ttlSecondsAfterFinished"), "60"),
        (("spec", "activeDeadlineSeconds"), "60"),
        (("spec", "replicatedJobs", 0, "replicas"), "3"),
        (("spec", "replicatedJobs", 0, "replicas"), True),
        (("spec", "replicatedJobs", 0, "template", "spec", "parallelism"), "2"),
    ],
    ids=[
        "bool-from-string",
        "bool-from-int",
        "int-from-string",
        "active-deadline-from-string",
        "replicas-string",
        "replicas-bool",
        "parallelism-string",
    ],
)
def test_scalars_of_the_wrong_type_are_rejected_not_converted(
    path: tuple[Any, ...], value: Any
) -> None:
    wire: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {}}}}}]
        },
    }
    target: Any = wire
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError):
        JobSet.model_validate(wire)
