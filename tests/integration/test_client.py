"""The raw-JSON client against a real apiserver: content types and error mapping."""

from __future__ import annotations

import pytest

from jobset_controller.runtime.client import AlreadyExists, Conflict, Invalid, KubeClient, NotFound
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
