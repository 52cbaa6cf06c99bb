"""The Helm chart stays in step with the kustomize manifests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.envtest.binaries import ensure_binaries

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.tools  # runs helm, from the Kubernetes binaries
CHART = ROOT / "charts" / "jobset-controller"


def test_chart_rbac_rules_equal_the_manifests() -> None:
    manifests = next(yaml.safe_load_all((ROOT / "manifests" / "rbac" / "role.yaml").read_text()))
    chart = yaml.safe_load((CHART / "files" / "manager-rules.yaml").read_text())
    assert chart == manifests["rules"]


def test_chart_ships_the_generated_crd() -> None:
    crd = CHART / "crds" / "jobset.x-k8s.io_jobsets.yaml"
    generated = ROOT / "manifests" / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml"
    assert crd.read_text() == generated.read_text()


def _helm_template(*values: str) -> dict[str, dict[str, Any]]:
    # Built and cached like the other binaries (hack/k8s-binaries.sh): never skipped.
    helm = ensure_binaries(("helm",)) / "helm"
    sets = [arg for value in values for arg in ("--set", value)]
    rendered = subprocess.run(
        [str(helm), "template", "jobset", str(CHART), "-n", "jobs", *sets],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return {
        f"{doc['kind']}/{doc['metadata']['name']}": doc
        for doc in yaml.safe_load_all(rendered)
        if doc
    }


def test_metrics_service_and_reader_role_are_always_rendered() -> None:
    documents = _helm_template()
    service = documents["Service/jobset-metrics-service"]
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}
    ]
    reader = documents["ClusterRole/jobset-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not any(name.startswith("ServiceMonitor/") for name in documents)


def test_prometheus_enable_renders_a_service_monitor_that_prometheus_may_use() -> None:
    documents = _helm_template("prometheus.enable=true", "prometheus.prometheusNamespace=mon")
    monitor = documents["ServiceMonitor/jobset-metrics-service-monitor"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint == {
        "port": "https",
        "path": "/metrics",
        "scheme": "https",
        "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "tlsConfig": {"insecureSkipVerify": True},
    }
    binding = documents["ClusterRoleBinding/jobset-metrics-reader-prometheus"]
    assert binding["roleRef"]["name"] == "jobset-metrics-reader"
    assert {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "mon"} in binding[
        "subjects"
    ]
    assert "RoleBinding/jobset-prometheus-k8s" in documents


def test_upstream_security_values_are_the_defaults_and_are_read() -> None:
    deployment = _helm_template()["Deployment/jobset-controller"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    custom = _helm_template(
        "controller.replicas=2",
        "controller.nodeSelector.pool=system",
        "controller.tolerations[0].key=dedicated",
        "controller.tolerations[0].operator=Exists",
        "controller.resources.limits.memory=1Gi",
        "image.repository=registry.example/jobset",
        "image.tag=v9",
    )["Deployment/jobset-controller"]
    spec = custom["spec"]["template"]["spec"]
    assert custom["spec"]["replicas"] == 2
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert spec["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
    assert spec["containers"][0]["image"] == "registry.example/jobset:v9"


def _config(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(
        documents["ConfigMap/jobset-controller-config"]["data"]["controller_manager_config.yaml"]
    )
    return config


WEBHOOK_CONFIGURATIONS = (
    "MutatingWebhookConfiguration/jobset-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration/jobset-validating-webhook-configuration",
)


def test_webhooks_with_internal_certificates_by_default() -> None:
    documents = _helm_template()
    assert _config(documents)["internalCertManagement"] == {
        "enable": True,
        "webhookServiceName": "jobset-webhook-service",
        "webhookSecretName": "jobset-webhook-server-cert",
    }
    secret = documents["Secret/jobset-webhook-server-cert"]
    assert secret["type"] == "Opaque"
    # Filled by the controller; an install renders no data (an upgrade renders the live data,
    # through `lookup`, which `helm template` never sees; tests/e2e/test_chart_swap.py).
    assert "data" not in secret
    service = documents["Service/jobset-webhook-service"]
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    for name in WEBHOOK_CONFIGURATIONS:
        configuration = documents[name]
        assert "annotations" not in configuration["metadata"]
        hooks = configuration["webhooks"]
        assert len(hooks) == 2  # the JobSet webhook and the pod webhook of exclusive placement
        for hook in hooks:
            assert hook["clientConfig"]["service"]["name"] == "jobset-webhook-service"
            assert hook["clientConfig"]["service"]["namespace"] == "jobs"
    pod = documents["Deployment/jobset-controller"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "webhook", "containerPort": 9443} in container["ports"]
    assert {v["name"] for v in pod["volumes"]} == {"config", "tmp"}  # certs go to /tmp
    assert not any(name.startswith(("Certificate/", "Issuer/")) for name in documents)


def test_cert_manager_enable_issues_and_mounts_the_certificates_instead() -> None:
    documents = _helm_template("certManager.enable=true")
    assert _config(documents)["internalCertManagement"]["enable"] is False
    assert "Secret/jobset-webhook-server-cert" not in documents
    certificate = documents["Certificate/jobset-cert"]["spec"]
    assert certificate["secretName"] == "jobset-webhook-server-cert"
    assert certificate["dnsNames"] == [
        "jobset-webhook-service.jobs.svc",
        "jobset-webhook-service.jobs.svc.cluster.local",
    ]
    assert certificate["issuerRef"] == {
        "kind": "Issuer",
        "name": "jobset-self-signed-issuer",
    }
    metrics = documents["Certificate/jobset-metrics-cert"]["spec"]
    assert metrics["secretName"] == "jobset-metrics-server-cert"
    assert "Issuer/jobset-self-signed-issuer" in documents
    for name in WEBHOOK_CONFIGURATIONS:
        assert documents[name]["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "jobs/jobset-cert"
        }
    pod = documents["Deployment/jobset-controller"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["webhook-cert"]["mountPath"] == "/tmp/k8s-webhook-server/serving-certs"
    assert mounts["metrics-cert"]["mountPath"] == "/tmp/k8s-metrics-server/serving-certs"
    assert mounts["webhook-cert"]["readOnly"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {
        "webhook-cert": "jobset-webhook-server-cert",
        "metrics-cert": "jobset-metrics-server-cert",
    }


def test_cert_manager_with_an_issuer_of_the_users_choosing() -> None:
    documents = _helm_template(
        "certManager.enable=true",
        "certManager.issuerRef.kind=ClusterIssuer",
        "certManager.issuerRef.name=corp-ca",
    )
    assert "Issuer/jobset-self-signed-issuer" not in documents
    for name in (
        "Certificate/jobset-cert",
        "Certificate/jobset-metrics-cert",
    ):
        assert documents[name]["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_network_policy_is_off_by_default_and_scopes_each_port_when_on() -> None:
    assert not any(name.startswith("NetworkPolicy/") for name in _helm_template())
    documents = _helm_template(
        "networkPolicy.enable=true", "networkPolicy.healthFrom[0].ipBlock.cidr=10.0.0.0/16"
    )
    policy = documents["NetworkPolicy/jobset-controller"]
    deployment = documents["Deployment/jobset-controller"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    webhook, metrics, health = policy["spec"]["ingress"]
    assert webhook == {"ports": [{"protocol": "TCP", "port": 9443}]}
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"jobset.x-k8s.io/metrics-access": "true"}}}
    ]
    assert health == {
        "from": [{"ipBlock": {"cidr": "10.0.0.0/16"}}],
        "ports": [{"protocol": "TCP", "port": 8081}],
    }


def test_the_charts_version_and_app_version_are_the_packages() -> None:
    """The version has one owner (`jobset_controller.__version__`); the chart in the repository
    repeats it because Helm reads it from Chart.yaml, and `make release` packages the chart with
    the release's version in both fields (hack/release.sh)."""
    from jobset_controller import __version__

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_recovery_options_are_rendered_into_a_configuration_the_controller_reads() -> None:
    from jobset_controller.config import parse_configuration

    default = parse_configuration(_config(_helm_template()))
    assert default.early_job_conditions.enable is False
    assert default.unreachable_node_pods.force_delete is True
    assert default.unreachable_node_pods.force_delete_after is None
    assert default.progress_counts.batch_period == 1.0
    custom = parse_configuration(
        _config(
            _helm_template(
                "controller.earlyJobConditions.enable=true",
                "controller.unreachableNodePods.forceDelete=false",
                "controller.unreachableNodePods.forceDeleteAfter=5m",
                "controller.progressCounts.batchPeriod=0s",
            )
        )
    )
    assert custom.early_job_conditions.enable is True
    assert custom.unreachable_node_pods.force_delete is False
    assert custom.unreachable_node_pods.force_delete_after == 300.0
    assert custom.progress_counts.batch_period == 0.0
