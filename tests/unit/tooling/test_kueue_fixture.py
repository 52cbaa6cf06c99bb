"""The Kueue fixture's pure parts: version agreement with hack/kueue.sh, which webhooks it
registers (only Kueue's kinds and the enabled integrations, or the rest would fail closed), the
conversion stanza of the five converting CRDs, and the Configuration it writes."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.envtest import kueue

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "kueue.sh"


def _hook(name: str, group: str, resource: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "x", "path": path}},
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": [resource],
            }
        ],
        "sideEffects": "None",
        "failurePolicy": "Fail",
    }


@pytest.fixture
def kueue_home(tmp_path: Path) -> Path:
    """A fake hack/kueue.sh layout: bin/kueue, crd/, webhook/manifests.yaml."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kueue").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "kueue").chmod(0o755)
    (tmp_path / "crd").mkdir()
    for name in ("workloads", "resourceflavors"):
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{name}.kueue.x-k8s.io"},
            "spec": {"group": "kueue.x-k8s.io", "names": {"plural": name}, "versions": []},
        }
        (tmp_path / "crd" / f"{name}.yaml").write_text(yaml.safe_dump(crd))
    (tmp_path / "webhook").mkdir()
    manifests = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                _hook("mjob.kb.io", "batch", "jobs", "/mutate-batch-v1-job"),
                _hook("mjobset.kb.io", "jobset.x-k8s.io", "jobsets", "/mutate-jobset"),
                _hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
                _hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads", "/mutate-workload"),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [
                _hook("vray.kb.io", "ray.io", "rayjobs", "/validate-ray"),
                _hook("vjobset.kb.io", "jobset.x-k8s.io", "jobsets", "/validate-jobset"),
            ],
        },
    ]
    (tmp_path / "webhook" / "manifests.yaml").write_text(yaml.safe_dump_all(manifests))
    return tmp_path


def test_script_default_matches_python_version() -> None:
    match = re.search(r'^KUEUE_VERSION="\$\{KUEUE_VERSION:-([^}]+)\}"', SCRIPT.read_text(), re.M)
    assert match is not None
    assert match.group(1) == kueue.KUEUE_VERSION


def test_prebuilt_directory_is_used(kueue_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBSET_KUEUE_BIN", str(kueue_home / "bin"))
    assert kueue.ensure_kueue() == kueue_home / "bin"


def test_only_kueue_kinds_and_enabled_integrations_are_registered(kueue_home: Path) -> None:
    configs = kueue.webhook_configurations(
        kueue_home / "bin", "https://127.0.0.1:9443", b"CA", [kueue.JOBSET_FRAMEWORK]
    )
    names = {body["kind"]: [h["name"] for h in body["webhooks"]] for _, body in configs}
    assert names == {
        "MutatingWebhookConfiguration": ["mjobset.kb.io", "mworkload.kb.io"],
        "ValidatingWebhookConfiguration": ["vjobset.kb.io"],
    }
    mutating = dict(configs)["/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"]
    client = mutating["webhooks"][0]["clientConfig"]
    assert client == {
        "url": "https://127.0.0.1:9443/mutate-jobset",
        "caBundle": base64.b64encode(b"CA").decode(),
    }


def test_batch_job_integration_adds_the_job_webhooks(kueue_home: Path) -> None:
    configs = kueue.webhook_configurations(
        kueue_home / "bin", "https://h", b"CA", [kueue.JOBSET_FRAMEWORK, kueue.JOB_FRAMEWORK]
    )
    registered = {h["name"] for _, body in configs for h in body["webhooks"]}
    assert "mjob.kb.io" in registered
    assert "mpod.kb.io" not in registered


def test_converting_crds_point_at_the_convert_url(kueue_home: Path) -> None:
    crds = {
        c["metadata"]["name"]: c for c in kueue.kueue_crds(kueue_home / "bin", "https://h:1", b"CA")
    }
    conversion = crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    assert conversion["webhook"]["clientConfig"]["url"] == "https://h:1/convert"
    assert "conversion" not in crds["resourceflavors.kueue.x-k8s.io"]["spec"]


def test_configuration_turns_off_what_cannot_work_out_of_cluster(tmp_path: Path) -> None:
    class Plane:
        workdir = tmp_path

    instance = kueue.Kueue(
        Plane(),  # type: ignore[arg-type]
        wait_for_pods_ready={"timeout": "5s"},
        bin_dir=tmp_path,
    )
    config = instance.configuration()
    assert config["internalCertManagement"] == {"enable": False}
    assert config["featureGates"]["VisibilityOnDemand"] is False
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["webhook"]["host"] == "127.0.0.1"
    assert config["integrations"]["frameworks"] == [kueue.JOBSET_FRAMEWORK, kueue.JOB_FRAMEWORK]
    assert config["waitForPodsReady"] == {"timeout": "5s"}
