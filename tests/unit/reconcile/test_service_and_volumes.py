"""The headless Service and the volume-claim PVCs (docs/behaviour.md#owned-objects)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import JOBSET_NAME_KEY
from jobset_controller.reconcile import reconcile

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

OWNER = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "name": "trainer",
    "uid": "jobset-uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


def test_headless_service_manifest(kit: Kit) -> None:
    plan = kit.reconcile(kit.jobset().replicated_job("w"))
    assert plan.service_to_create == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "trainer", "namespace": "ml", "ownerReferences": [OWNER]},
        "spec": {
            "clusterIP": "None",
            "selector": {JOBSET_NAME_KEY: "trainer"},
            "publishNotReadyAddresses": True,
        },
    }


@pytest.mark.parametrize(
    ("network", "service_exists", "expected_name", "expected_publish"),
    [
        ({"subdomain": "mesh"}, False, "mesh", True),
        ({"publishNotReadyAddresses": False}, False, "trainer", False),
        ({}, True, None, None),
        ({"enableDNSHostnames": False}, False, None, None),
    ],
    ids=[
        "service is named after a custom subdomain",
        "publishNotReadyAddresses false is kept",
        "an existing service is left alone",
        "no service without dns hostnames",
    ],
)
def test_service_creation(
    kit: Kit,
    network: dict[str, Any],
    service_exists: bool,
    expected_name: str | None,
    expected_publish: bool | None,
) -> None:
    builder = kit.jobset().replicated_job("w").network(**network)
    service = kit.service(expected_name or "trainer") if service_exists else None
    plan = kit.reconcile(builder, service=service)
    if expected_name is None:
        assert plan.service_to_create is None
        return
    assert plan.service_to_create is not None
    assert plan.service_to_create["metadata"]["name"] == expected_name
    assert plan.service_to_create["spec"]["publishNotReadyAddresses"] is expected_publish


def mounting(kit: Kit) -> JobSetBuilder:
    return kit.jobset().replicated_job(
        "w",
        pod_spec={
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/d"},
                        {"name": "ckpt", "mountPath": "/c"},
                    ],
                }
            ]
        },
    )


def test_pvc_manifests_with_retention_policies(kit: Kit) -> None:
    builder = (
        mounting(kit)
        .volume_claim("data", labels={"tier": "fast"})
        .volume_claim("ckpt", when_deleted="Retain")
    )
    plan = kit.reconcile(builder)
    data, ckpt = plan.pvcs_to_create
    assert data == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data-trainer",
            "namespace": "ml",
            "labels": {"tier": "fast", JOBSET_NAME_KEY: "trainer"},
            "ownerReferences": [OWNER],
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    assert ckpt["metadata"]["name"] == "ckpt-trainer"
    assert "ownerReferences" not in ckpt["metadata"], "Retain PVCs outlive the JobSet"


def test_pvcs_are_sent_while_suspended(kit: Kit) -> None:
    plan = kit.reconcile(mounting(kit).volume_claim("data").volume_claim("ckpt").suspend())
    assert [pvc["metadata"]["name"] for pvc in plan.pvcs_to_create] == [
        "data-trainer",
        "ckpt-trainer",
    ]


def test_no_pvcs_once_finished(kit: Kit) -> None:
    builder = mounting(kit).volume_claim("data").volume_claim("ckpt")
    builder.condition("Completed", reason="AllJobsCompleted").status(terminalState="Completed")
    assert kit.reconcile(builder).pvcs_to_create == ()


def test_existing_pvcs_are_not_created_again(kit: Kit) -> None:
    builder = mounting(kit).volume_claim("data").volume_claim("ckpt")
    snapshot = dataclasses.replace(
        kit.snapshot(builder), existing_pvcs=frozenset({"data-trainer", "unrelated"})
    )
    assert [pvc["metadata"]["name"] for pvc in reconcile(snapshot).pvcs_to_create] == [
        "ckpt-trainer"
    ]


def test_unknown_pvcs_are_all_created_like_upstream(kit: Kit) -> None:
    builder = mounting(kit).volume_claim("data")
    assert kit.snapshot(builder).existing_pvcs is None
    assert len(reconcile(kit.snapshot(builder)).pvcs_to_create) == 1
