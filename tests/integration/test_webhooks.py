"""The JobSet admission webhooks, called by a real kube-apiserver over TLS."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.config import parse_configuration
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller.runtime.client import Invalid, KubeClient
from jobset_controller.webhook.server import MUTATE_PATH
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.webhooks import (
    MUTATING,
    jobset_webhook_configuration,
    jobset_webhooks_served,
    mutation_in_effect,
)


@pytest.fixture
async def webhooks(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[None]:
    async with jobset_webhooks_served(
        control_plane,
        kube,
        namespace,
        tmp_path,
        features=FeatureGates(),
        validate_operations=["CREATE", "UPDATE"],
    ):
        yield


def jobset(name: str = "js", **spec: Any) -> dict[str, Any]:
    workers = replicated_job("workers", restart_policy=None)
    return jobset_manifest(name, replicated_jobs=[workers], **spec)


def path(namespace: str, name: str = "") -> str:
    base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    return f"{base}/{name}" if name else base


@pytest.mark.usefixtures("webhooks")
async def test_the_mutating_webhook_applies_upstreams_defaults(
    kube: KubeClient, namespace: str
) -> None:
    created = await kube.create(path(namespace), jobset())
    spec = created["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    job = spec["replicatedJobs"][0]["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"


@pytest.mark.usefixtures("webhooks")
async def test_the_validating_webhook_rejects_with_the_field_path_and_upstreams_message(
    kube: KubeClient, namespace: str
) -> None:
    body = jobset()
    body["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "workers", "status": "Ready"}]
    with pytest.raises(Invalid) as info:
        await kube.create(path(namespace), body)
    message = info.value.message
    assert 'admission webhook "vjobset.kb.io" denied the request' in message
    assert "spec.replicatedJobs[0].dependsOn" in message
    assert "DependsOn can't be set for the first ReplicatedJob" in message


@pytest.mark.usefixtures("webhooks")
async def test_updates_keep_replicated_jobs_immutable_except_while_suspended(
    kube: KubeClient, namespace: str
) -> None:
    created = await kube.create(path(namespace), jobset(suspend=True))
    spec = copy.deepcopy(created["spec"])
    spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        "pool": "b"
    }
    updated = await kube.merge_patch(path(namespace, "js"), {"spec": spec})
    assert updated["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "nodeSelector"
    ] == {"pool": "b"}
    spec = copy.deepcopy(updated["spec"])
    spec["replicatedJobs"][0]["replicas"] = 3
    with pytest.raises(Invalid, match="field is immutable"):
        await kube.merge_patch(path(namespace, "js"), {"spec": spec})


@pytest.mark.usefixtures("webhooks")
async def test_an_existing_claim_must_be_retained(kube: KubeClient, namespace: str) -> None:
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    await kube.create(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {"metadata": {"name": "data-js"}, "spec": claim_spec},
    )
    body = jobset(
        volumeClaimPolicies=[{"templates": [{"metadata": {"name": "data"}, "spec": claim_spec}]}]
    )
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    with pytest.raises(Invalid, match="retentionPolicy must be retain when PVC exists"):
        await kube.create(path(namespace), body)


async def test_the_manager_serves_the_webhooks_when_certificates_are_mounted(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    control_plane.ca.write_pair(
        tmp_path, f"manager-webhook-{namespace}", common_name="webhook",
        ip_addresses=("127.0.0.1",), server=True,
    )  # fmt: skip
    config = parse_configuration(
        {
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path)},
            # Certificates from outside (cert-manager's mounted Secret): nothing managed here.
            "internalCertManagement": {"enable": False},
        }
    )
    manager = Manager(
        ManagerOptions(
            config=config,
            kubeconfig=str(control_plane.kubeconfig),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            leader_elect=False,
        )
    )
    task = asyncio.create_task(manager.run())
    try:
        while manager.webhook_port is None:
            assert not task.done(), "manager stopped early"
            await asyncio.sleep(0.05)  # poll interval of the wait for the listening port
        name = f"m-{namespace}"
        url = f"https://127.0.0.1:{manager.webhook_port}{MUTATE_PATH}"
        await kube.create(
            MUTATING,
            jobset_webhook_configuration(
                name, "mjobset.kb.io", url, control_plane.ca.cert_pem, namespace, ["CREATE"]
            ),
        )
        try:
            await mutation_in_effect(kube, namespace)
            created = await kube.create(path(namespace), jobset())
            assert created["spec"]["successPolicy"] == {"operator": "All"}
        finally:
            await kube.request("DELETE", f"{MUTATING}/{name}")
    finally:
        manager.request_stop()
        assert await asyncio.wait_for(task, scaled(30)) == 0


@pytest.mark.usefixtures("webhooks")
@pytest.mark.parametrize(
    ("change", "schema_says"),
    [
        pytest.param(
            {"replicas": -1},
            "spec.replicatedJobs[1].replicas in body should be greater than or equal to 0",
            id="negative replicas",
        ),
        pytest.param(
            {"dependsOn": [{"name": "first", "status": "Done"}]},
            'Unsupported value: "Done"',
            id="unknown dependsOn status",
        ),
        pytest.param(None, "must have at most 50 items", id="51 volumeClaimPolicies"),
    ],
)
async def test_what_breaks_the_schema_gets_the_api_servers_422_not_a_webhook_refusal(
    kube: KubeClient, namespace: str, change: dict[str, Any] | None, schema_says: str
) -> None:
    body = jobset()
    first = copy.deepcopy(body["spec"]["replicatedJobs"][0])
    first["name"] = "first"
    body["spec"]["replicatedJobs"].insert(0, first)
    if change is None:
        template = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        body["spec"]["volumeClaimPolicies"] = [{"templates": [template]} for _ in range(51)]
    else:
        body["spec"]["replicatedJobs"][1].update(change)
    with pytest.raises(Invalid) as info:
        await kube.create(path(namespace), body)
    assert info.value.status == 422
    assert schema_says in info.value.message
    assert "admission webhook" not in info.value.message
    assert "cannot read the JobSet" not in info.value.message
