"""The controller's pod template (kustomize and Helm) is admitted under Pod Security "restricted".

Pod Security admission enforces on Pods (for Deployments it only warns), so each install's pod
template is submitted as a Pod, server-side dry run, into a namespace that enforces the
restricted profile; the Deployment itself must apply there without a PodSecurity warning.
"""

from __future__ import annotations

import copy
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.polling import scaled

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restricted(control_plane: ControlPlane) -> Iterator[str]:
    name = f"restricted-{uuid.uuid4().hex[:6]}"
    labels = {
        f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn")
    } | {"pod-security.kubernetes.io/enforce-version": "latest"}
    status, body = control_plane.request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}}
    )
    assert status == 201, body
    try:
        yield name
    finally:
        control_plane.delete_namespace(name)


def kustomize_deployment(control_plane: ControlPlane) -> dict[str, Any]:
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests" / "default"))
    return next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")


def helm_deployment(control_plane: ControlPlane, namespace: str) -> dict[str, Any]:
    rendered = subprocess.run(
        [str(control_plane.bin_dir / "helm"), "template", "jobset",
         str(ROOT / "charts" / "jobset-controller"), "--namespace", namespace],
        capture_output=True, text=True, check=True, timeout=scaled(60),
    ).stdout  # fmt: skip
    return next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")


def dry_run(control_plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> str:
    """Server-side dry run into `namespace`; returns kubectl's output (warnings included)."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", namespace, "-f", "-",
        input_text=yaml.safe_dump(obj), check=False,
    )  # fmt: skip


def as_pod(deployment: dict[str, Any]) -> dict[str, Any]:
    template = deployment["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "controller-pod-check", "labels": template["metadata"]["labels"]},
        "spec": copy.deepcopy(template["spec"]),
    }


@pytest.mark.parametrize("install", ["kustomize", "helm"])
def test_the_pod_template_is_admitted_under_restricted(
    control_plane: ControlPlane, restricted: str, install: str
) -> None:
    deployment = (
        kustomize_deployment(control_plane)
        if install == "kustomize"
        else helm_deployment(control_plane, restricted)
    )
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    control_plane.request(
        "POST", f"/api/v1/namespaces/{restricted}/serviceaccounts", {"metadata": {"name": account}}
    )
    pod = as_pod(deployment)
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["spec"]["volumes"]

    output = dry_run(control_plane, restricted, pod)
    assert "serverside-applied (server dry run)" in output, output
    output = dry_run(control_plane, restricted, deployment)
    assert "serverside-applied (server dry run)" in output, output
    assert "PodSecurity" not in output, output

    # The check is real: without the seccomp profile the same pod is refused.
    weakened = copy.deepcopy(pod)
    del weakened["spec"]["securityContext"]["seccompProfile"]
    output = dry_run(control_plane, restricted, weakened)
    assert 'violates PodSecurity "restricted:latest"' in output, output
