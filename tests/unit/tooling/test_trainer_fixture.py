"""The Trainer fixture's pure parts: version agreement with hack/trainer.sh, the certificates its
rotator must keep (or it issues ones the API server on 127.0.0.1 rejects), and the webhook
configuration it registers by URL."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import re
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from jobset_controller_dev.envtest import trainer, trainer_certs

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "trainer.sh"
# cert-controller's lookahead: a certificate that expires sooner is replaced at start.
LOOKAHEAD = datetime.timedelta(days=90)
SECRET_NAME = "kubeflow-trainer-webhook-cert"


def test_the_fixture_and_the_build_script_name_the_same_version() -> None:
    found = re.search(r'TRAINER_VERSION="\$\{TRAINER_VERSION:-(v[^}]+)\}"', SCRIPT.read_text())
    assert found is not None
    assert found.group(1) == trainer.TRAINER_VERSION


def test_the_certificates_pass_the_rotators_checks_and_serve_127_0_0_1() -> None:
    issued = trainer_certs.issue()
    secret = issued.secret()
    assert secret["metadata"] == {"name": SECRET_NAME, "namespace": "kubeflow-system"}
    ca = x509.load_pem_x509_certificate(issued.ca_cert)
    cert = x509.load_pem_x509_certificate(issued.cert)
    # The rotator parses ca.key as PKCS#1 RSA before it injects the CA.
    assert issued.ca_key.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    ca_names = ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ca_names.get_values_for_type(x509.DNSName) == ["kubeflow-trainer-ca"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        "kubeflow-trainer-controller-manager.kubeflow-system.svc"
    ]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    cert.verify_directly_issued_by(ca)
    horizon = datetime.datetime.now(datetime.UTC) + LOOKAHEAD
    assert ca.not_valid_after_utc > horizon
    assert cert.not_valid_after_utc > horizon


@pytest.fixture
def trainer_home(tmp_path: Path) -> Path:
    """A fake hack/trainer.sh layout holding a webhook manifest like Trainer's."""
    (tmp_path / "webhook").mkdir()
    hooks = [
        {
            "name": f"validator.{kind}.trainer.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {"name": "webhook-service", "namespace": "system", "path": f"/v-{kind}"}
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": [f"{kind}s"]}],
        }
        for kind in ("trainjob", "trainingruntime")
    ]
    manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validating-webhook-configuration"},
        "webhooks": hooks,
    }
    (tmp_path / "webhook" / "manifests.yaml").write_text("---\n" + yaml.safe_dump(manifest))
    return tmp_path


def test_every_webhook_is_called_by_url_under_the_name_the_rotator_injects(
    trainer_home: Path,
) -> None:
    body = trainer.webhook_configuration(trainer_home / "bin", "https://127.0.0.1:9", b"CA")
    assert body["metadata"]["name"] == "validator.trainer.kubeflow.org"
    assert [h["clientConfig"] for h in body["webhooks"]] == [
        {"url": "https://127.0.0.1:9/v-trainjob", "caBundle": base64.b64encode(b"CA").decode()},
        {
            "url": "https://127.0.0.1:9/v-trainingruntime",
            "caBundle": base64.b64encode(b"CA").decode(),
        },
    ]
    assert all(h["failurePolicy"] == "Fail" for h in body["webhooks"])
