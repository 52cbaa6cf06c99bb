"""The raw-JSON client against a real apiserver: content types and error mapping."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from jobset_controller.runtime.client import AlreadyExists, Conflict, Invalid, KubeClient, NotFound
from jobset_controller.runtime.kubeconfig import in_cluster
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job


def jobset(name: str = "demo") -> dict[str, object]:
    return jobset_manifest(name, replicated_jobs=[replicated_job("w")])


async def test_merge_patch_and_server_side_apply_work_on_a_crd(
    kube: KubeClient, namespace: str
) -> None:
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    await kube.create(path, jobset())
    patched = await kube.merge_patch(f"{path}/demo", {"spec": {"suspend": True}})
    assert patched["spec"]["suspend"] is True
    applied = await kube.apply(f"{path}/other", jobset("other"), field_manager="test")
    again = await kube.apply(f"{path}/other", jobset("other"), field_manager="test")
    assert applied["metadata"]["generation"] == again["metadata"]["generation"] == 1


async def test_api_errors_arrive_as_typed_exceptions(kube: KubeClient, namespace: str) -> None:
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    created = await kube.create(path, jobset())
    with pytest.raises(AlreadyExists):
        await kube.create(path, jobset())
    with pytest.raises(NotFound):
        await kube.get(f"{path}/missing")
    stale = {**created, "metadata": {**created["metadata"], "resourceVersion": "1"}}
    with pytest.raises(Conflict):
        await kube.replace(f"{path}/demo", stale)
    bad = jobset("bad")
    bad["spec"] = {"ttlSecondsAfterFinished": -1}
    with pytest.raises(Invalid, match=r"spec\.ttlSecondsAfterFinished"):
        await kube.create(path, bad)


async def test_in_cluster_credentials_reach_the_api_server_as_the_service_account(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """What a pod sees (KUBERNETES_SERVICE_HOST/PORT, the mounted token and CA) is enough to
    talk to a real API server, authenticated as the ServiceAccount."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    config = control_plane.service_account_kubeconfig(
        "in-cluster-test", "pod", tmp_path / "kubeconfig"
    )
    token = yaml.safe_load(config.read_text())["users"][0]["user"]["token"]
    (account / "token").write_text(token)
    shutil.copy(control_plane.workdir / "pki" / "ca.crt", account / "ca.crt")
    server = urlsplit(control_plane.server)
    env = {
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
    }
    client = KubeClient.for_access(in_cluster(env, account))
    try:
        review = await client.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    finally:
        await client.close()
    assert review["status"]["userInfo"]["username"] == "system:serviceaccount:in-cluster-test:pod"
