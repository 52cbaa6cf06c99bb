"""The child Job manifest: spec overrides, ownership, placement and volumes.

See docs/behaviour.md#child-labels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import (
    EXCLUSIVE_KEY,
    JOB_KEY,
    NAMESPACED_JOB_KEY,
    NO_SCHEDULE_TAINT_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    JobSet,
)
from jobset_controller.reconcile.placement import NO_SCHEDULE_TOLERATION

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def only_job(kit: Kit, builder: JobSetBuilder) -> Mapping[str, Any]:
    plan = kit.reconcile(builder)
    assert len(plan.jobs_to_create) == 1
    return plan.jobs_to_create[0]


def test_manifest_is_a_batch_v1_job_in_the_jobset_namespace(kit: Kit) -> None:
    job = only_job(kit, kit.jobset().replicated_job("w"))
    assert job["apiVersion"] == "batch/v1"
    assert job["kind"] == "Job"
    assert job["metadata"]["name"] == "trainer-w-0"
    assert job["metadata"]["namespace"] == "ml"


def test_controller_owner_reference_to_the_jobset(kit: Kit) -> None:
    job = only_job(kit, kit.jobset().replicated_job("w"))
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "trainer",
            "uid": "jobset-uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


@pytest.mark.parametrize(
    ("jobset_suspend", "template_suspend", "expected"),
    [(None, True, False), (True, False, True), (False, None, False)],
    ids=[
        "running jobset overrides a suspended template",
        "suspended jobset overrides a running template",
        "explicitly running jobset creates running jobs",
    ],
)
def test_job_suspend_is_the_jobset_suspend(
    kit: Kit, jobset_suspend: bool | None, template_suspend: bool | None, expected: bool
) -> None:
    builder = kit.jobset().replicated_job("w")
    wire = builder.wire()
    if template_suspend is not None:
        wire["spec"]["replicatedJobs"][0]["template"]["spec"]["suspend"] = template_suspend
    if jobset_suspend is not None:
        wire["spec"]["suspend"] = jobset_suspend
    plan = kit.reconcile(JobSet.model_validate(wire))
    assert plan.jobs_to_create[0]["spec"]["suspend"] is expected


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        (None, "trainer"),
        ({"subdomain": "mesh"}, "mesh"),
        ({"enableDNSHostnames": False}, None),
        ({"enableDNSHostnames": True, "subdomain": "mesh"}, "mesh"),
    ],
    ids=[
        "defaulted network enables dns hostnames under the jobset name",
        "custom subdomain",
        "dns hostnames disabled leaves the subdomain unset",
        "explicit dns hostnames with custom subdomain",
    ],
)
def test_pod_subdomain(kit: Kit, network: dict[str, Any] | None, expected: str | None) -> None:
    builder = kit.jobset().replicated_job("w")
    if network is not None:
        builder.network(**network)
    job = only_job(kit, builder)
    assert job["spec"]["template"]["spec"].get("subdomain") == expected


def test_admission_defaults_reach_the_job_but_not_the_jobset(kit: Kit) -> None:
    js = kit.jobset().replicated_job("w").build()
    plan = kit.reconcile(js)
    spec = plan.jobs_to_create[0]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["template"]["spec"]["restartPolicy"] == "OnFailure"
    # The cached JobSet model is untouched (defaults are never written back).
    assert js.spec.replicated_jobs[0].template.spec.completion_mode is None


def test_node_selector_strategy_adds_namespaced_job_selector_and_toleration(kit: Kit) -> None:
    builder = kit.jobset().replicated_job(
        "w", pod_spec={"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu"}]}
    )
    builder.annotations(**{EXCLUSIVE_KEY: "zone", NODE_SELECTOR_STRATEGY_KEY: "true"})
    pod_spec = only_job(kit, builder)["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"pool": "a", NAMESPACED_JOB_KEY: "ml_trainer-w-0"}
    assert pod_spec["tolerations"] == [
        {"key": "gpu"},
        {"key": NO_SCHEDULE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert dict(NO_SCHEDULE_TOLERATION) == pod_spec["tolerations"][1]
    assert "affinity" not in pod_spec


def test_node_selector_flag_on_the_job_template_alone_combines_with_jobset_exclusive(
    kit: Kit,
) -> None:
    builder = kit.jobset().replicated_job("w", job_annotations={NODE_SELECTOR_STRATEGY_KEY: "x"})
    builder.annotations(**{EXCLUSIVE_KEY: "zone"})
    pod_spec = only_job(kit, builder)["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"][NAMESPACED_JOB_KEY] == "ml_trainer-w-0"


def test_affinity_strategy_writes_required_affinity_and_anti_affinity(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w")
    builder.annotations(**{EXCLUSIVE_KEY: "topology.kubernetes.io/zone"})
    pod_spec = only_job(kit, builder)["spec"]["template"]["spec"]
    own = hashlib.sha1(b"ml/trainer-w-0").hexdigest()
    assert pod_spec["affinity"] == {
        "podAffinity": {
            REQUIRED: [
                {
                    "labelSelector": {
                        "matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": [own]}]
                    },
                    "topologyKey": "topology.kubernetes.io/zone",
                    "namespaceSelector": {},
                }
            ]
        },
        "podAntiAffinity": {
            REQUIRED: [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": JOB_KEY, "operator": "Exists"},
                            {"key": JOB_KEY, "operator": "NotIn", "values": [own]},
                        ]
                    },
                    "topologyKey": "topology.kubernetes.io/zone",
                    "namespaceSelector": {},
                }
            ]
        },
    }
    assert "nodeSelector" not in pod_spec


def test_affinity_strategy_appends_to_the_templates_own_affinity(kit: Kit) -> None:
    existing = {
        "nodeAffinity": {"preferred": []},
        "podAffinity": {REQUIRED: [{"topologyKey": "host", "labelSelector": {}}]},
    }
    builder = kit.jobset().replicated_job("w", pod_spec={"affinity": existing})
    builder.annotations(**{EXCLUSIVE_KEY: "zone"})
    affinity = only_job(kit, builder)["spec"]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"] == {"preferred": []}
    assert [term["topologyKey"] for term in affinity["podAffinity"][REQUIRED]] == ["host", "zone"]
    assert len(affinity["podAntiAffinity"][REQUIRED]) == 1


def test_without_exclusive_placement_the_pod_spec_is_the_templates(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w", pod_spec={"nodeSelector": {"pool": "a"}})
    pod_spec = only_job(kit, builder)["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"pool": "a"}
    assert "affinity" not in pod_spec
    assert "tolerations" not in pod_spec


@pytest.mark.parametrize(
    ("mounts", "init_mounts", "expected_volumes"),
    [
        (["data"], [], ["data"]),
        ([], ["data"], ["data"]),
        (["other"], [], []),
    ],
    ids=[
        "a container mounting the template name gets the claim volume",
        "an init container mount counts too",
        "no matching mount adds no volume",
    ],
)
def test_volume_claim_templates_become_volumes_of_mounting_pods(
    kit: Kit, mounts: list[str], init_mounts: list[str], expected_volumes: list[str]
) -> None:
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "volumeMounts": [{"name": m, "mountPath": f"/{m}"} for m in mounts],
            }
        ],
        "initContainers": [
            {
                "name": "init",
                "image": "busybox",
                "volumeMounts": [{"name": m, "mountPath": f"/{m}"} for m in init_mounts],
            }
        ],
    }
    builder = kit.jobset().replicated_job("w", pod_spec=pod_spec).volume_claim("data")
    if "data" not in mounts + init_mounts:
        builder.replicated_job(
            "mounter",
            pod_spec={
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "volumeMounts": [{"name": "data", "mountPath": "/d"}],
                    }
                ]
            },
        )
    plan = kit.reconcile(builder)
    job = next(j for j in plan.jobs_to_create if j["metadata"]["name"] == "trainer-w-0")
    volumes = job["spec"]["template"]["spec"].get("volumes", [])
    assert [v["name"] for v in volumes] == expected_volumes
    for volume in volumes:
        assert volume["persistentVolumeClaim"] == {"claimName": f"{volume['name']}-trainer"}


def test_exclusive_keys_come_from_one_level_only(kit: Kit) -> None:
    # The replicatedJob asks for the affinity strategy on racks; the JobSet-level node-selector
    # flag belongs to the JobSet-level topology and must not switch the strategy.
    builder = kit.jobset().replicated_job("w", job_annotations={EXCLUSIVE_KEY: "rack"})
    builder.annotations(**{EXCLUSIVE_KEY: "zone", NODE_SELECTOR_STRATEGY_KEY: "true"})
    job = only_job(kit, builder)
    assert job["metadata"]["annotations"][EXCLUSIVE_KEY] == "rack"
    assert NODE_SELECTOR_STRATEGY_KEY not in job["metadata"]["annotations"]
    pod_spec = job["spec"]["template"]["spec"]
    assert NAMESPACED_JOB_KEY not in (pod_spec.get("nodeSelector") or {})
    assert "affinity" in pod_spec
