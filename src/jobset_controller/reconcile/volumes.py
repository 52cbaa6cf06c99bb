"""Volume claim policies: the PVCs a JobSet shares, and the volumes that mount them.

See docs/behaviour.md#owned-objects.

Each template of ``spec.volumeClaimPolicies`` becomes one PVC named ``<template>-<jobset>``, owned
by the JobSet (so garbage-collected with it) only when its retention policy is Delete. Every child
Job whose containers or init containers mount a volume of the template's name gets a volume of
that name pointing at the PVC.
"""

import copy
from collections.abc import Mapping
from typing import Any

from jobset_controller.api import JOBSET_NAME_KEY, JobSet, RetentionWhenDeleted
from jobset_controller.api.naming import pvc_name
from jobset_controller.reconcile.ownership import controller_reference


def pvc_manifests(js: JobSet) -> tuple[dict[str, Any], ...]:
    """One PVC manifest per template of every volume claim policy, in spec order."""
    name = js.metadata.name or ""
    out: list[dict[str, Any]] = []
    for policy in js.spec.volume_claim_policies:
        retention = policy.retention_policy
        owned = retention is None or retention.when_deleted == RetentionWhenDeleted.DELETE
        for template in policy.templates:
            metadata: dict[str, Any] = {
                "name": pvc_name(template.metadata.name or "", name),
                "namespace": js.metadata.namespace or "",
                "labels": {**template.metadata.labels, JOBSET_NAME_KEY: name},
            }
            if template.metadata.annotations:
                metadata["annotations"] = dict(template.metadata.annotations)
            if owned:
                metadata["ownerReferences"] = [controller_reference(js)]
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": metadata,
                    "spec": copy.deepcopy(template.spec),
                }
            )
    return tuple(out)


def mounted_volume_names(pod_spec: Mapping[str, Any]) -> frozenset[str]:
    """Names of the volumes any container or init container of ``pod_spec`` mounts."""
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for container in pod_spec.get(key) or []:
            for mount in container.get("volumeMounts") or []:
                names.add(str(mount.get("name", "")))
    return frozenset(names)


def with_claim_volumes(pod_spec: Mapping[str, Any], js: JobSet) -> dict[str, Any]:
    """``pod_spec`` with a PVC volume for every claim template one of its containers mounts.

    A volume that already has the template's name is left alone (admission rejects that
    conflict, and a second volume of the same name would make the Job invalid).
    """
    out = dict(pod_spec)
    mounted = mounted_volume_names(pod_spec)
    volumes = list(out.get("volumes") or [])
    existing = {str(volume.get("name", "")) for volume in volumes}
    for policy in js.spec.volume_claim_policies:
        for template in policy.templates:
            claim = template.metadata.name or ""
            if claim in mounted and claim not in existing:
                volumes.append(
                    {
                        "name": claim,
                        "persistentVolumeClaim": {
                            "claimName": pvc_name(claim, js.metadata.name or "")
                        },
                    }
                )
                existing.add(claim)
    if volumes:
        out["volumes"] = volumes
    return out
