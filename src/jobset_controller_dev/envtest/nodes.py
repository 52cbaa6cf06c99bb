"""Simulated Nodes for the full local cluster: their shape and their topology labels.

A Node here is only an API object; kwok (see kwok_stages.py) plays its kubelet. The harness creates
Nodes with their capacity already in `status` (the apiserver keeps the status given on create), so
the scheduler sees cpu, memory, pods and `nvidia.com/gpu` from the first moment, and kwok only adds
the kubelet-owned parts (conditions, node info).

Default layout (`rack_topology()`): 4 racks x 2 nodes, racks split over 2 zones, one node pool per
rack, so topology-aware placement (exclusive placement per rack / node pool / zone) has several
domains of several nodes each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobset_controller.api.constants import NAMESPACED_JOB_KEY

# kwok manages exactly the Nodes carrying this annotation (--manage-nodes-with-annotation-selector).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}"
# ... and this label makes them easy to list (`kubectl get nodes -l type=kwok`).
KWOK_TYPE_LABEL = "type"
KWOK_TYPE_VALUE = "kwok"

HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
RACK_LABEL = "topology.jobset.test/rack"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
GPU_RESOURCE = "nvidia.com/gpu"
# Label JobSet's node-selector exclusive-placement strategy looks for (tests add it to nodes).
NAMESPACED_JOB_LABEL = NAMESPACED_JOB_KEY

REGION = "region-1"


@dataclass(frozen=True)
class NodeSpec:
    """One simulated Node. The InternalIP is assigned by the cluster when left unset; pods get
    IPs from the node's `pod_cidr` if set, else from kwok's cluster-wide pool (10.244.0.1/16)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Taints in API form, e.g. {"key": "dedicated", "value": "x", "effect": "NoSchedule"}.
    taints: Sequence[Mapping[str, str]] = ()
    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = 110
    gpus: int = 4
    pod_cidr: str | None = None
    internal_ip: str | None = None
    unschedulable: bool = False

    def manifest(self, *, internal_ip: str) -> dict[str, Any]:
        """The Node object to create (status included: the apiserver keeps it on create)."""
        resources: dict[str, str] = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": "100Gi",
        }
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
        labels = {
            HOSTNAME_LABEL: self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            KWOK_TYPE_LABEL: KWOK_TYPE_VALUE,
            **self.labels,
        }
        annotations = {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE, **self.annotations}
        spec: dict[str, Any] = {}
        if self.pod_cidr:
            spec["podCIDR"] = self.pod_cidr
            spec["podCIDRs"] = [self.pod_cidr]
        if self.taints:
            spec["taints"] = [dict(t) for t in self.taints]
        if self.unschedulable:
            spec["unschedulable"] = True
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": annotations},
            "spec": spec,
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "addresses": [
                    {"type": "InternalIP", "address": internal_ip},
                    {"type": "Hostname", "address": self.name},
                ],
            },
        }


def zone_name(index: int) -> str:
    """zone-a, zone-b, ... (index 0-based)."""
    return f"zone-{chr(ord('a') + index)}"


def rack_topology(
    racks: int = 4,
    nodes_per_rack: int = 2,
    zones: int = 2,
    *,
    prefix: str = "kwok",
    cpu: str = "16",
    memory: str = "64Gi",
    gpus: int = 4,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> list[NodeSpec]:
    """`racks` x `nodes_per_rack` nodes named `<prefix>-r<rack>-n<i>`.

    Racks are spread evenly over `zones` zones (4 racks, 2 zones: racks 0-1 in zone-a, 2-3 in
    zone-b); each rack is its own node pool. Every node gets the zone, region, rack, node-pool and
    hostname labels, plus `labels`, and `taints`.
    """
    if racks < 1 or nodes_per_rack < 1 or zones < 1:
        raise ValueError("racks, nodes_per_rack and zones must be at least 1")
    zones = min(zones, racks)
    specs: list[NodeSpec] = []
    for rack in range(racks):
        zone = zone_name(rack * zones // racks)
        for i in range(nodes_per_rack):
            specs.append(
                NodeSpec(
                    name=f"{prefix}-r{rack}-n{i}",
                    labels={
                        REGION_LABEL: REGION,
                        ZONE_LABEL: zone,
                        RACK_LABEL: f"rack-{rack}",
                        NODE_POOL_LABEL: f"pool-{rack}",
                        **(labels or {}),
                    },
                    taints=taints,
                    cpu=cpu,
                    memory=memory,
                    gpus=gpus,
                    pods=pods,
                )
            )
    return specs
