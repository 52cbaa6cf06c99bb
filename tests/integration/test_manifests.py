"""The install manifests render with kustomize and are accepted by a real apiserver."""

from __future__ import annotations

from pathlib import Path

import yaml

from jobset_controller.config import load_configuration
from jobset_controller_dev.envtest import ControlPlane

ROOT = Path(__file__).resolve().parents[2]


def test_default_kustomization_renders_and_applies(control_plane: ControlPlane) -> None:
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "default"))
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("CustomResourceDefinition", "jobsets.jobset.x-k8s.io") in names
    assert ("Deployment", "jobset-controller-manager") in names
    assert ("ClusterRole", "jobset-manager-role") in names
    assert all(
        d["metadata"].get("namespace") in (None, "jobset-system")
        for d in docs
        if d["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")
    )
    try:
        output = control_plane.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input_text=rendered
        )
        assert "deployment.apps/jobset-controller-manager serverside-applied" in output
        assert "customresourcedefinition.apiextensions.k8s.io/jobsets.jobset.x-k8s.io" in output
    finally:
        control_plane.kubectl("delete", "namespace", "jobset-system", "--wait=false", check=False)


def test_helm_chart_renders_and_the_apiserver_accepts_it(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    import subprocess

    helm = control_plane.bin_dir / "helm"
    rendered = subprocess.run(
        [
            str(helm),
            "template",
            "jobset",
            str(ROOT / "charts" / "jobset-controller"),
            "--namespace",
            namespace,
            "--set",
            "controller.featureGates.RestartJob=true",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config["data"]["controller_manager_config.yaml"])
    assert load_configuration(config_file).feature_gates == {"RestartJob": True}
    output = control_plane.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        input_text=rendered,
    )
    assert "deployment.apps/jobset-controller serverside-applied (server dry run)" in output


def test_webhook_overlay_wires_service_configurations_and_certificate(
    control_plane: ControlPlane,
) -> None:
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "with-webhooks"))
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}
    service = docs[("Service", "jobset-webhook-service")]
    assert service["spec"]["ports"] == [{"port": 443, "targetPort": 9443}]
    mutating = docs[("MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration")]
    [hook] = mutating["webhooks"]
    assert hook["name"] == "mjobset.kb.io"
    assert hook["clientConfig"]["service"] == {
        "name": "jobset-webhook-service",
        "namespace": "jobset-system",
        "path": "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
    }
    validating = docs[("ValidatingWebhookConfiguration", "jobset-validating-webhook-configuration")]
    assert validating["webhooks"][0]["clientConfig"]["service"]["path"] == (
        "/validate-jobset-x-k8s-io-v1alpha2-jobset"
    )
    certificate = docs[("Certificate", "jobset-serving-cert")]
    assert certificate["spec"]["secretName"] == "jobset-webhook-server-cert"
    deployment = docs[("Deployment", "jobset-controller-manager")]
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["webhook-cert"] == "/tmp/k8s-webhook-server/serving-certs"
    assert {"name": "webhook-cert", "secret": {"secretName": "jobset-webhook-server-cert"}} in pod[
        "volumes"
    ]
