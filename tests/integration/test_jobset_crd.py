"""The JobSet CRD on a real kube-apiserver: schema, defaults, CEL rules, printer columns."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller.api import JobSet, default_jobset, validate_create
from jobset_controller_dev.crdgen import CRD_FILE, build_crd, fetch_openapi, render
from jobset_controller_dev.envtest import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"


def minimal_jobset(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "demo"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "main", "image": "busybox"}],
                                }
                            }
                        }
                    },
                }
            ],
            **spec,
        },
    }


def create(plane: ControlPlane, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return plane.request("POST", JOBSETS.format(ns=ns), body)


def merge_patch(
    plane: ControlPlane, ns: str, name: str, patch: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    return plane.request(
        "PATCH",
        JOBSETS.format(ns=ns) + f"/{name}",
        patch,
        content_type="application/merge-patch+json",
    )


def test_crd_is_established_with_upstream_names(control_plane: ControlPlane) -> None:
    status, crd = control_plane.request(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
    )
    assert status == 200
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert crd["spec"]["names"] == {
        "kind": "JobSet",
        "listKind": "JobSetList",
        "plural": "jobsets",
        "singular": "jobset",
    }
    assert crd["spec"]["scope"] == "Namespaced"
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha2", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_documented_examples_pass_our_validation_and_the_apiserver(
    control_plane: ControlPlane, namespace: str, path: Path
) -> None:
    manifest = yaml.safe_load(path.read_text())
    defaulted = default_jobset(JobSet.model_validate(manifest))
    assert validate_create(defaulted) == []
    status, body = create(control_plane, namespace, defaulted.to_dict())
    assert status == 201, body.get("message")
    assert body["metadata"]["generation"] == 1


def test_crd_structural_defaults_are_applied(control_plane: ControlPlane, namespace: str) -> None:
    js = minimal_jobset(failurePolicy={"maxRestarts": 1})
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "ports"
    ] = [{"containerPort": 8080}]
    status, body = create(control_plane, namespace, js)
    assert status == 201, body
    rjob = body["spec"]["replicatedJobs"][0]
    assert rjob["replicas"] == 1
    assert rjob["groupName"] == "default"
    assert body["spec"]["failurePolicy"]["restartStrategy"] == "Recreate"
    # The embedded pod template carries the apiserver's own defaults (a list-map key here).
    port = rjob["template"]["spec"]["template"]["spec"]["containers"][0]["ports"][0]
    assert port == {"containerPort": 8080, "protocol": "TCP"}


@pytest.mark.parametrize(
    ("field", "first", "second"),
    [
        ("successPolicy", {"operator": "All"}, {"operator": "Any"}),
        ("failurePolicy", {"maxRestarts": 1}, {"maxRestarts": 2}),
        ("startupPolicy", {"startupPolicyOrder": "AnyOrder"}, {"startupPolicyOrder": "InOrder"}),
        ("network", {"enableDNSHostnames": True}, {"enableDNSHostnames": False}),
    ],
)
def test_cel_rejects_changes_to_immutable_policies(
    control_plane: ControlPlane,
    namespace: str,
    field: str,
    first: dict[str, Any],
    second: dict[str, Any],
) -> None:
    status, body = create(control_plane, namespace, minimal_jobset(**{field: first}))
    assert status == 201, body
    status, body = merge_patch(control_plane, namespace, "demo", {"spec": {field: second}})
    assert status == 422
    assert f"spec.{field}: Invalid value" in body["message"]
    assert "Value is immutable" in body["message"]


def test_cel_rejects_in_order_startup_with_depends_on(
    control_plane: ControlPlane, namespace: str
) -> None:
    js = minimal_jobset(startupPolicy={"startupPolicyOrder": "InOrder"})
    second = copy.deepcopy(js["spec"]["replicatedJobs"][0])
    second["name"] = "trainer"
    second["dependsOn"] = [{"name": "workers", "status": "Complete"}]
    js["spec"]["replicatedJobs"].append(second)
    status, body = create(control_plane, namespace, js)
    assert status == 422
    assert "StartupPolicy and DependsOn APIs are mutually exclusive" in body["message"]


def test_cel_rejects_namespace_in_volume_claim_template(
    control_plane: ControlPlane, namespace: str
) -> None:
    template = {"metadata": {"name": "data", "namespace": "other"}, "spec": {}}
    js = minimal_jobset(volumeClaimPolicies=[{"templates": [template]}])
    status, body = create(control_plane, namespace, js)
    assert status == 422
    assert "namespace cannot be set for VolumeClaimPolicies templates" in body["message"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(
            lambda pod: pod.update(restartPolicy="Sometimes"),
            "spec.replicatedJobs[0].template.spec.template.spec.restartPolicy: "
            'Unsupported value: "Sometimes"',
            id="bad-enum",
        ),
        pytest.param(
            lambda pod: pod["containers"][0].pop("name"),
            "spec.replicatedJobs[0].template.spec.template.spec.containers[0].name: Required value",
            id="missing-required",
        ),
        pytest.param(
            lambda pod: pod["containers"][0].update(resources={"limits": {"cpu": "lots"}}),
            "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits.cpu",
            id="bad-quantity",
        ),
        pytest.param(
            lambda pod: pod.update(activeDeadlineSeconds="soon"),
            "spec.replicatedJobs[0].template.spec.template.spec.activeDeadlineSeconds: "
            'Invalid value: "string"',
            id="wrong-type",
        ),
    ],
)
def test_invalid_pod_template_is_rejected_with_its_field_path(
    control_plane: ControlPlane, namespace: str, mutate: Any, expected: str
) -> None:
    js = minimal_jobset()
    mutate(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"])
    status, body = create(control_plane, namespace, js)
    assert status == 422
    assert expected in body["message"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"ttlSecondsAfterFinished": -1}, "spec.ttlSecondsAfterFinished", id="ttl"),
        pytest.param(
            {"failurePolicy": {"restartStrategy": "Sometimes"}},
            "spec.failurePolicy.restartStrategy: Unsupported value",
            id="restart-strategy",
        ),
        pytest.param(
            {"successPolicy": {"operator": "Most"}},
            "spec.successPolicy.operator: Unsupported value",
            id="success-operator",
        ),
    ],
)
def test_jobset_fields_are_validated_by_the_schema(
    control_plane: ControlPlane, namespace: str, spec: dict[str, Any], expected: str
) -> None:
    status, body = create(control_plane, namespace, minimal_jobset(**spec))
    assert status == 422
    assert expected in body["message"]


def test_negative_replicas_and_too_many_depends_on_are_rejected(
    control_plane: ControlPlane, namespace: str
) -> None:
    js = minimal_jobset()
    js["spec"]["replicatedJobs"][0]["replicas"] = -1
    js["spec"]["replicatedJobs"][0]["dependsOn"] = [
        {"name": f"dep{i}", "status": "Ready"} for i in range(6)
    ]
    status, body = create(control_plane, namespace, js)
    assert status == 422
    assert "spec.replicatedJobs[0].replicas" in body["message"]
    assert (
        "spec.replicatedJobs[0].dependsOn: Too many: 6: must have at most 5 items"
        in body["message"]
    )


def test_kubectl_get_jobsets_prints_the_upstream_columns(
    control_plane: ControlPlane, namespace: str
) -> None:
    status, body = create(control_plane, namespace, minimal_jobset(suspend=True))
    assert status == 201, body
    output = control_plane.kubectl("get", "jobsets", "-n", namespace)
    header, row = output.splitlines()[:2]
    assert header.split() == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    assert row.split()[:2] == ["demo", "true"]


def test_server_side_reapply_of_unchanged_jobset_keeps_generation(
    control_plane: ControlPlane, namespace: str
) -> None:
    js = default_jobset(JobSet.model_validate(minimal_jobset())).to_dict()
    path = JOBSETS.format(ns=namespace) + "/demo?fieldManager=test-user"
    generations = []
    for _ in range(2):
        status, body = control_plane.request(
            "PATCH", path, js, content_type="application/apply-patch+yaml"
        )
        assert status in (200, 201), body
        generations.append(body["metadata"]["generation"])
    assert generations == [1, 1]


def test_regenerating_the_crd_from_the_apiserver_is_a_no_op(control_plane: ControlPlane) -> None:
    batch_v1, core_v1 = fetch_openapi(control_plane)
    committed = (ROOT / "manifests" / "crd" / "bases" / CRD_FILE).read_text()
    assert render(build_crd(batch_v1, core_v1)) == committed


def test_volume_claim_templates_are_whole_claims_with_api_version_and_kind(
    control_plane: ControlPlane, namespace: str
) -> None:
    template = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    js = minimal_jobset(volumeClaimPolicies=[{"templates": [template]}])
    status, body = control_plane.request(
        "POST", JOBSETS.format(ns=namespace) + "?fieldValidation=Strict", js
    )
    assert status == 201, body.get("message")
    stored = body["spec"]["volumeClaimPolicies"][0]["templates"][0]
    assert (stored["apiVersion"], stored["kind"]) == ("v1", "PersistentVolumeClaim")
