"""The install manifests render with kustomize and are accepted by a real apiserver.

The default install serves the admission webhooks with internal certificate management, like
upstream's; manifests/with-webhooks is the same install with cert-manager instead, and
manifests/with-prometheus the default one with a ServiceMonitor.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from jobset_controller.config import Configuration, load_configuration
from jobset_controller.controller.webhookcerts import (
    MUTATING_WEBHOOK_CONFIGURATION,
    VALIDATING_WEBHOOK_CONFIGURATION,
)
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.polling import scaled

ROOT = Path(__file__).resolve().parents[2]
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # the Configuration's default certDir


def _configuration(config_map: dict[str, Any], tmp_path: Path, name: str) -> Configuration:
    path = tmp_path / name
    path.write_text(config_map["data"]["controller_manager_config.yaml"])
    return load_configuration(path)


def _webhook_configurations(docs: dict[tuple[str, str], Any]) -> tuple[Any, Any]:
    return (
        docs[("MutatingWebhookConfiguration", MUTATING_WEBHOOK_CONFIGURATION)],
        docs[("ValidatingWebhookConfiguration", VALIDATING_WEBHOOK_CONFIGURATION)],
    )


def test_default_kustomization_renders_and_applies(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "default"))
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert ("CustomResourceDefinition", "jobsets.jobset.x-k8s.io") in names
    assert ("Deployment", "jobset-controller-manager") in names
    assert ("ClusterRole", "jobset-manager-role") in names
    # Upstream's names for secure metrics: the reader role and the HTTPS metrics Service.
    assert ("ClusterRole", "jobset-metrics-reader") in names
    # Upstream's roles for people (unbound: admins bind them to those who submit or read JobSets).
    assert {("ClusterRole", "jobset-editor-role"), ("ClusterRole", "jobset-viewer-role")} <= names
    assert ("Service", "jobset-controller-manager-metrics-service") in names
    # Webhooks on by default, with upstream's names; the certificate Secret ships empty and the
    # controller fills it, writes the certificate under /tmp (the Deployment's emptyDir) and
    # injects its CA into both configurations, whose caBundle ships empty.
    service = by_name[("Service", "jobset-webhook-service")]
    assert service["spec"]["ports"] == [{"port": 443, "targetPort": 9443}]
    for configuration in _webhook_configurations(by_name):
        assert "annotations" not in configuration["metadata"]
        for hook in configuration["webhooks"]:  # the JobSet and the pod webhook
            assert hook["clientConfig"]["service"]["name"] == "jobset-webhook-service"
            assert "caBundle" not in hook["clientConfig"]
    secret = by_name[("Secret", "jobset-webhook-server-cert")]
    assert secret["type"] == "Opaque"
    assert "data" not in secret
    config = _configuration(by_name[("ConfigMap", "jobset-manager-config")], tmp_path, "c.yaml")
    internal = config.internal_cert_management
    assert internal.enable
    assert (internal.webhook_service_name, internal.webhook_secret_name) == (
        "jobset-webhook-service",
        "jobset-webhook-server-cert",
    )
    assert config.webhook.cert_dir == ""  # the default, CERT_DIR
    pod = by_name[("Deployment", "jobset-controller-manager")]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "webhook", "containerPort": 9443} in container["ports"]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert any(CERT_DIR.startswith(path + "/") for path in writable), writable
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
        assert (
            f"mutatingwebhookconfiguration.admissionregistration.k8s.io/{MUTATING_WEBHOOK_CONFIGURATION}"
            in output
        )
    finally:
        # failurePolicy Fail with no controller behind the Service: remove them at once, or
        # every later JobSet create in this API server would be refused.
        control_plane.kubectl(
            "delete",
            f"mutatingwebhookconfiguration/{MUTATING_WEBHOOK_CONFIGURATION}",
            f"validatingwebhookconfiguration/{VALIDATING_WEBHOOK_CONFIGURATION}",
            "--ignore-not-found",
            check=False,
        )
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
        timeout=scaled(60),
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "ClusterRole",  # the controller's, the metrics reader, and the editor/viewer roles
        "ClusterRole",
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "MutatingWebhookConfiguration",
        "Role",
        "RoleBinding",
        "Secret",
        "Service",
        "Service",
        "ServiceAccount",
        "ValidatingWebhookConfiguration",
    ]
    config = _configuration(next(d for d in docs if d["kind"] == "ConfigMap"), tmp_path, "c.yaml")
    assert config.feature_gates == {"RestartJob": True}
    assert config.internal_cert_management.enable
    assert config.internal_cert_management.webhook_secret_name == "jobset-webhook-server-cert"
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


def test_cert_manager_overlay_wires_service_configurations_and_certificate(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "with-webhooks"))
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}
    default = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "default"))
    base = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(default) if d}
    # The same install, cert-manager instead of internal management: no empty Secret shipped,
    # the Configuration differs only in internalCertManagement.enable.
    assert ("Secret", "jobset-webhook-server-cert") not in docs
    config_name = ("ConfigMap", "jobset-manager-config")
    ours = _configuration(docs[config_name], tmp_path, "ours.yaml")
    theirs = _configuration(base[config_name], tmp_path, "base.yaml")
    assert not ours.internal_cert_management.enable
    assert ours == dataclasses.replace(
        theirs,
        internal_cert_management=dataclasses.replace(theirs.internal_cert_management, enable=False),
    )
    for configuration in _webhook_configurations(docs):
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "jobset-system/jobset-serving-cert"
        }
    issuer = docs[("Issuer", "jobset-selfsigned-issuer")]
    assert issuer["spec"] == {"selfSigned": {}}
    service = docs[("Service", "jobset-webhook-service")]
    assert service["spec"]["ports"] == [{"port": 443, "targetPort": 9443}]
    mutating = docs[("MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration")]
    hook, pod_hook = mutating["webhooks"]
    assert hook["name"] == "mjobset.kb.io"
    assert pod_hook["name"] == "mpod.kb.io"
    assert pod_hook["objectSelector"] == {
        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    }
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
    assert mounts["webhook-cert"] == CERT_DIR
    assert {"name": "webhook-cert", "secret": {"secretName": "jobset-webhook-server-cert"}} in pod[
        "volumes"
    ]


def test_prometheus_overlay_adds_a_service_monitor_that_prometheus_may_use(
    control_plane: ControlPlane, namespace: str
) -> None:
    """manifests/with-prometheus = the default install + a ServiceMonitor on the HTTPS metrics
    Service and the RBAC kube-prometheus's ServiceAccount needs (read /metrics, discover the
    endpoints); the RBAC is accepted by a real API server (the ServiceMonitor needs the Prometheus
    Operator's CRD, which this API server does not have)."""
    default = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "default"))
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "with-prometheus"))
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    added = set(by_name) - {
        (d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(default) if d
    }
    assert added == {
        ("ServiceMonitor", "jobset-controller-manager-metrics-monitor"),
        ("ClusterRoleBinding", "jobset-metrics-reader-prometheus"),
        ("Role", "jobset-prometheus-k8s"),
        ("RoleBinding", "jobset-prometheus-k8s"),
    }
    monitor = by_name[("ServiceMonitor", "jobset-controller-manager-metrics-monitor")]
    service = by_name[("Service", "jobset-controller-manager-metrics-service")]
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == "jobset-system"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    for kind, name in (("ClusterRoleBinding", "jobset-metrics-reader-prometheus"),
                       ("RoleBinding", "jobset-prometheus-k8s")):  # fmt: skip
        ref = by_name[(kind, name)]["roleRef"]
        assert (ref["kind"], ref["name"]) in by_name, ref
    rbac = [d for d in docs if (d["kind"], d["metadata"]["name"]) in added - {
        ("ServiceMonitor", "jobset-controller-manager-metrics-monitor")}]  # fmt: skip
    for doc in rbac:  # into this test's namespace (a dry run cannot create jobset-system)
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
    output = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-",
        input_text=yaml.safe_dump_all(rbac),
    )  # fmt: skip
    assert output.count("serverside-applied (server dry run)") == 3, output


def test_network_policy_overlay_adds_one_policy_that_the_apiserver_accepts(
    control_plane: ControlPlane, namespace: str
) -> None:
    """manifests/with-networkpolicy = the default install + one NetworkPolicy selecting the
    controller's pods: the webhook port open to all, metrics only from labelled namespaces, no
    rule for the health port (only the node's own traffic reaches it)."""
    default = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "default"))
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "with-networkpolicy"))
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    before = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(default) if d}
    added = [d for d in docs if (d["kind"], d["metadata"]["name"]) not in before]
    assert [(d["kind"], d["metadata"]["name"]) for d in added] == [
        ("NetworkPolicy", "jobset-controller-manager")
    ]
    policy = added[0]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    webhook, metrics = policy["spec"]["ingress"]
    assert webhook == {"ports": [{"protocol": "TCP", "port": 9443}]}
    assert metrics["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"jobset.x-k8s.io/metrics-access": "true"}}}
    ]
    policy["metadata"]["namespace"] = namespace
    status, body = control_plane.request(
        "POST",
        f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies?dryRun=All",
        policy,
    )
    assert status == 201, body
