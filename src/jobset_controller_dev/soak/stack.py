"""What the soak runs on: the full local cluster with two node pools, Kueue with two ClusterQueues
that preempt each other, PersistentVolumes for claims, the shipped roles, and a token that may read
the controllers' secure /metrics.

Why two pools: exclusive placement keeps a rack for one Job, and a rack holding any other
JobSet's pod is not free; the exclusive shape gets racks of its own (pool `exclusive`, rack labels
of their own) so that its pods never wait on the rest of the mix.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from jobset_controller_dev.envtest.controlplane import ControlPlaneError
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kueue import KUEUE_API, KUEUE_API_VERSION
from jobset_controller_dev.envtest.nodes import RACK_LABEL, NodeSpec, rack_topology
from jobset_controller_dev.soak.mix import (
    EXCLUSIVE_POOL,
    GENERAL_POOL,
    HIGH_PRIORITY,
    HIGH_QUEUE,
    LOW_PRIORITY,
    LOW_QUEUE,
    POOL_LABEL,
)

NODES_PER_RACK: Final = 4
EXCLUSIVE_RACKS: Final = 4
# cpu per ClusterQueue: each queued JobSet has 4 pods of 1 cpu, so 8 holds two at once per queue.
# At 2 JobSets a second a tenth of the mix is queued and the queues' capacity is about the arrival
# rate: Kueue's backlog grows over an hour (counted as queued at the end, not as violations). With
# 16 the cluster ran more pods than 2 cores serve: kube-controller-manager's Job controller fell
# 6-15 minutes behind (finished pods kept its finalizer that long) and every JobSet waited on it
# (docs/reliability.md).
QUEUE_CPU: Final = 8


def node_specs(total: int) -> list[NodeSpec]:
    """`total` nodes in racks of 4: 4 racks in the exclusive pool (rack labels `exc-rack-<i>`),
    the rest in the general pool."""
    general_racks = max(1, total // NODES_PER_RACK - EXCLUSIVE_RACKS)
    general = rack_topology(
        racks=general_racks,
        nodes_per_rack=NODES_PER_RACK,
        zones=2,
        prefix="gen",
        labels={POOL_LABEL: GENERAL_POOL},
    )
    exclusive = [
        dataclasses.replace(
            spec, labels={**spec.labels, RACK_LABEL: "exc-" + spec.labels[RACK_LABEL]}
        )
        for spec in rack_topology(
            racks=EXCLUSIVE_RACKS,
            nodes_per_rack=NODES_PER_RACK,
            zones=2,
            prefix="exc",
            labels={POOL_LABEL: EXCLUSIVE_POOL},
        )
    ]
    return general + exclusive


def _create(cluster: FullCluster, path: str, body: dict[str, Any]) -> None:
    status, reply = cluster.request("POST", path, body)
    if status != 201:
        raise ControlPlaneError(f"POST {path}: {status} {reply}")


def kueue_objects(cluster: FullCluster, namespace: str, queue_cpu: int = QUEUE_CPU) -> None:
    """A flavor, two ClusterQueues of `queue_cpu` cpu in one cohort (the high queue reclaims
    what the low one borrowed), a LocalQueue for each in `namespace`, and the two
    priorities."""
    kueue = {"apiVersion": KUEUE_API_VERSION}
    _create(
        cluster,
        f"{KUEUE_API}/resourceflavors",
        {**kueue, "kind": "ResourceFlavor", "metadata": {"name": "soak"}, "spec": {}},
    )
    for name, value in ((LOW_PRIORITY, 100), (HIGH_PRIORITY, 1000)):
        _create(
            cluster,
            f"{KUEUE_API}/workloadpriorityclasses",
            {**kueue, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
    for queue in (LOW_QUEUE, HIGH_QUEUE):
        spec = {
            "cohortName": "soak",
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "soak",
                            "resources": [{"name": "cpu", "nominalQuota": str(queue_cpu)}],
                        }
                    ],
                }
            ],
        }
        _create(
            cluster,
            f"{KUEUE_API}/clusterqueues",
            {**kueue, "kind": "ClusterQueue", "metadata": {"name": queue}, "spec": spec},
        )
        _create(
            cluster,
            f"{KUEUE_API}/namespaces/{namespace}/localqueues",
            {
                **kueue,
                "kind": "LocalQueue",
                "metadata": {"name": queue},
                "spec": {"clusterQueue": queue},
            },
        )
