"""A real local Kubernetes control plane (etcd + kube-apiserver) for tests and the dev loop, and a
full local cluster on top of it (kube-controller-manager, kube-scheduler, kwok simulated nodes).

Run `python -m jobset_controller.envtest` (or `jobset-controller envtest`) to start one in the
foreground and print its kubeconfig (`--full` for the full cluster); Ctrl-C stops it and leaves no
process behind.
"""

from jobset_controller.envtest.binaries import BinariesMissing, ensure_binaries
from jobset_controller.envtest.controlplane import ControlPlane, ControlPlaneError
from jobset_controller.envtest.fullcluster import FullCluster
from jobset_controller.envtest.nodes import NodeSpec, rack_topology

__all__ = [
    "BinariesMissing",
    "ControlPlane",
    "ControlPlaneError",
    "FullCluster",
    "NodeSpec",
    "ensure_binaries",
    "rack_topology",
]
