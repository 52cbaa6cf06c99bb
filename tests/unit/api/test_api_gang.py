"""spec.scheduling (KEP-969, gate JobSetWorkloadAwareSchedulingAPI): the model, the defaulting
of the groups and admission's checks (docs/behaviour.md#gang-scheduling)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from jobset_controller.api import FeatureGates, JobSet, validate_create, validate_update
from jobset_controller.api.gang import scheduling_groups

GATE = FeatureGates(workload_aware_scheduling=True)


def jobset(scheduling: Any = None, **spec: Any) -> dict[str, Any]:
    """A leader (1 pod) and workers (2 Jobs x 4 pods)."""
    pod = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    wire: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "template": {"spec": {"template": copy.deepcopy(pod)}}},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {"parallelism": 4, "completions": 4, "template": copy.deepcopy(pod)}
                    },
                },
            ],
            **spec,
        },
    }
    if scheduling is not None:
        wire["spec"]["scheduling"] = scheduling
    return wire


def errors(wire: dict[str, Any], features: FeatureGates = GATE) -> list[str]:
    return [str(error) for error in validate_create(JobSet.model_validate(wire), features=features)]


def test_the_model_reads_and_writes_scheduling_losslessly() -> None:
    scheduling = {
        "replicatedJobs": [
            {
                "targetReplicatedJobs": ["leader", "workers"],
                "schedulingPolicy": {"gang": {"minCount": 3}},
                "schedulingConstraints": {"topology": [{"key": "rack"}]},
                "disruptionMode": {"all": {}},
                "resourceClaims": [{"name": "c", "resourceClaimName": "claim"}],
                "futureField": 1,
            }
        ]
    }
    wire = jobset(scheduling)
    assert JobSet.model_validate(wire).to_dict() == wire


def test_gate_off_rejects_scheduling() -> None:
    assert errors(jobset({"schedulingPolicy": {"gang": {}}}), FeatureGates()) == [
        "spec.scheduling: Forbidden: scheduling cannot be set when "
        "JobSetWorkloadAwareSchedulingAPI feature gate is disabled"
    ]


def test_gate_off_accepts_a_jobset_without_scheduling() -> None:
    assert errors(jobset(), FeatureGates()) == []


@pytest.mark.parametrize(
    "scheduling",
    [
        {},
        {"schedulingPolicy": {"gang": {}}},
        {"schedulingPolicy": {"basic": {}}, "disruptionMode": {"single": {}}},
        {"schedulingPolicy": {"gang": {"minCount": 9}}},
        {"replicatedJobs": [{"targetReplicatedJobs": ["leader", "workers"]}]},
        {
            "replicatedJobs": [
                {"targetReplicatedJobs": ["leader"], "schedulingPolicy": {"basic": {}}},
                {"targetReplicatedJobs": ["workers"], "job": {"schedulingPolicy": {"gang": {}}}},
            ]
        },
    ],
    ids=["empty", "gang", "basic", "min count all pods", "grouped", "job level"],
)
def test_valid_scheduling_is_accepted(scheduling: dict[str, Any]) -> None:
    assert errors(jobset(scheduling)) == []


def test_top_level_fields_cannot_be_combined_with_replicated_jobs() -> None:
    scheduling = {
        "schedulingPolicy": {"gang": {}},
        "replicatedJobs": [{"targetReplicatedJobs": ["leader", "workers"]}],
    }
    assert errors(jobset(scheduling)) == [
        "spec.scheduling: Forbidden: cannot set schedulingPolicy, schedulingConstraints, or "
        "disruptionMode together with replicatedJobs"
    ]


def test_every_replicated_job_must_be_targeted_without_top_level_scheduling() -> None:
    scheduling = {"replicatedJobs": [{"targetReplicatedJobs": ["leader"]}]}
    assert errors(jobset(scheduling)) == [
        "spec.scheduling.replicatedJobs: Required value: replicatedJob 'workers' must be "
        "targeted by a replicatedJobs entry when no top-level scheduling is set"
    ]


def test_a_target_must_exist() -> None:
    scheduling = {"replicatedJobs": [{"targetReplicatedJobs": ["leader", "workers", "ghost"]}]}
    assert errors(jobset(scheduling)) == [
        'spec.scheduling.replicatedJobs[0].targetReplicatedJobs[2]: Invalid value: "ghost": '
        "invalid replicatedJob name 'ghost' does not appear in .spec.ReplicatedJobs"
    ]


def test_a_target_is_named_once() -> None:
    scheduling = {
        "replicatedJobs": [
            {"targetReplicatedJobs": ["leader", "workers"]},
            {"targetReplicatedJobs": ["workers"]},
        ]
    }
    assert errors(jobset(scheduling)) == [
        'spec.scheduling.replicatedJobs[1].targetReplicatedJobs[0]: Duplicate value: "workers"'
    ]


def test_an_entry_needs_targets() -> None:
    scheduling: dict[str, Any] = {"replicatedJobs": [{"targetReplicatedJobs": []}]}
    assert "spec.scheduling.replicatedJobs[0].targetReplicatedJobs: Required value" in errors(
        jobset(scheduling)
    )


def test_job_level_needs_exactly_one_target_and_no_leaf_fields() -> None:
    scheduling = {
        "replicatedJobs": [
            {
                "targetReplicatedJobs": ["leader", "workers"],
                "schedulingPolicy": {"gang": {}},
                "job": {},
            }
        ]
    }
    assert errors(jobset(scheduling)) == [
        'spec.scheduling.replicatedJobs[0].targetReplicatedJobs: Invalid value: ["leader",'
        '"workers"]: must name exactly one replicatedJob when job is set',
        "spec.scheduling.replicatedJobs[0]: Forbidden: cannot set schedulingPolicy, "
        "schedulingConstraints, disruptionMode, or resourceClaims together with job",
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schedulingPolicy", {"basic": {}, "gang": {}}, "exactly one of basic or gang"),
        ("schedulingPolicy", {}, "exactly one of basic or gang"),
        ("disruptionMode", {"single": {}, "all": {}}, "exactly one of single or all"),
    ],
    ids=["both policies", "no policy", "both disruption modes"],
)
def test_unions_need_exactly_one_member(field: str, value: Any, message: str) -> None:
    (error,) = errors(jobset({field: value}))
    assert error.startswith(f"spec.scheduling.{field}: Invalid value")
    assert message in error


def test_a_resource_claim_names_one_source() -> None:
    scheduling = {
        "replicatedJobs": [
            {"targetReplicatedJobs": ["leader", "workers"], "resourceClaims": [{"name": "c"}]}
        ]
    }
    (error,) = errors(jobset(scheduling))
    assert error.startswith("spec.scheduling.replicatedJobs[0].resourceClaims[0]: Invalid value")
    assert "exactly one of resourceClaimName or resourceClaimTemplateName" in error


def test_min_count_cannot_exceed_the_pods_of_the_group() -> None:
    assert errors(jobset({"schedulingPolicy": {"gang": {"minCount": 10}}})) == [
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 10: must not exceed "
        "the number of pods the group represents (9)"
    ]
    per_rjob = {
        "replicatedJobs": [
            {"targetReplicatedJobs": ["leader"]},
            {
                "targetReplicatedJobs": ["workers"],
                "job": {"schedulingPolicy": {"gang": {"minCount": 5}}},
            },
        ]
    }
    assert errors(jobset(per_rjob)) == [
        "spec.scheduling.replicatedJobs[1].job.schedulingPolicy.gang.minCount: Invalid value: 5: "
        "must not exceed the number of pods the group represents (4)"
    ]


def test_explicit_top_level_min_count_is_rejected_with_sequenced_startup() -> None:
    wire = jobset(
        {"schedulingPolicy": {"gang": {"minCount": 2}}},
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    assert errors(wire) == [
        "spec.scheduling.schedulingPolicy.gang.minCount: Forbidden: an explicit gang minCount "
        "cannot be set with DependsOn or InOrder startup, which use one PodGroup per ReplicatedJob"
    ]


def test_at_most_eight_pod_groups() -> None:
    wire = jobset({"replicatedJobs": [{"targetReplicatedJobs": ["leader"]}]})
    wire["spec"]["replicatedJobs"][1]["replicas"] = 8
    wire["spec"]["scheduling"]["replicatedJobs"].append(
        {"targetReplicatedJobs": ["workers"], "job": {}}
    )
    assert errors(wire) == [
        "spec.scheduling: Invalid value: 9: must produce at most 8 PodGroups (the Workload "
        "API's limit of podGroupTemplates), got 9"
    ]


def test_the_job_template_cannot_carry_its_own_scheduling() -> None:
    wire = jobset({})
    wire["spec"]["replicatedJobs"][0]["template"]["spec"]["scheduling"] = {}
    wire["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["schedulingGroup"] = {
        "podGroupName": "mine"
    }
    found = errors(wire)
    assert [error.split(":")[0] for error in found] == [
        "spec.replicatedJobs[0].template.spec.scheduling",
        "spec.replicatedJobs[1].template.spec.template.spec.schedulingGroup",
    ]


def test_job_template_scheduling_without_jobset_scheduling_is_left_alone() -> None:
    wire = jobset()
    wire["spec"]["replicatedJobs"][0]["template"]["spec"]["scheduling"] = {}
    assert errors(wire) == []


def test_colliding_template_names_are_rejected() -> None:
    wire = jobset()
    leader_workers = copy.deepcopy(wire["spec"]["replicatedJobs"][0])
    leader_workers["name"] = "leader-workers"
    wire["spec"]["replicatedJobs"].append(leader_workers)
    wire["spec"]["scheduling"] = {
        "replicatedJobs": [
            {"targetReplicatedJobs": ["leader", "workers"]},
            {"targetReplicatedJobs": ["leader-workers"]},
        ]
    }
    assert errors(wire) == [
        'spec.scheduling: Invalid value: "leader-workers": two scheduling groups are named '
        "'leader-workers'; rename a replicatedJob"
    ]


def test_one_jobset_wide_group_needs_one_priority_class() -> None:
    wire = jobset({})
    wire["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "priorityClassName"
    ] = "high"
    (error,) = errors(wire)
    assert "one priorityClassName" in error


def test_scheduling_is_immutable_while_running() -> None:
    old = JobSet.model_validate(jobset({"schedulingPolicy": {"gang": {}}}))
    new = JobSet.model_validate(jobset({"schedulingPolicy": {"basic": {}}}))
    assert [str(e) for e in validate_update(old, new, features=GATE)] == [
        'spec.scheduling: Invalid value: {"schedulingPolicy":{"basic":{}}}: field is immutable '
        "while the JobSet is not suspended"
    ]


def test_scheduling_may_change_while_suspended() -> None:
    old = JobSet.model_validate(jobset({"schedulingPolicy": {"gang": {}}}, suspend=True))
    new = JobSet.model_validate(jobset({"schedulingPolicy": {"basic": {}}}, suspend=True))
    assert validate_update(old, new, features=GATE) == []


def test_an_elastic_downscale_below_an_explicit_min_count_is_rejected() -> None:
    gates = FeatureGates(workload_aware_scheduling=True, elastic_job_set=True)
    scheduling = {"schedulingPolicy": {"gang": {"minCount": 9}}}
    old_wire = jobset(scheduling)
    new_wire = jobset(scheduling)
    for wire in (old_wire, new_wire):
        wire["spec"]["replicatedJobs"][1]["template"]["spec"]["completionMode"] = "Indexed"
    new_wire["spec"]["replicatedJobs"][1]["replicas"] = 1
    found = [
        str(e)
        for e in validate_update(
            JobSet.model_validate(old_wire), JobSet.model_validate(new_wire), features=gates
        )
    ]
    assert (
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 9: must not exceed the "
        "number of pods the group represents (5)" in found
    )


def test_groups_default_to_gang_with_min_count_the_represented_pods() -> None:
    js = JobSet.model_validate(
        jobset(
            {
                "replicatedJobs": [
                    {"targetReplicatedJobs": ["leader"]},
                    {"targetReplicatedJobs": ["workers"]},
                ]
            }
        )
    )
    assert [(g.template_name, g.policy, g.min_count) for g in scheduling_groups(js)] == [
        ("leader", "Gang", 1),
        ("workers", "Gang", 8),
    ]
