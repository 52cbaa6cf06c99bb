"""A real local Kubernetes control plane (etcd + kube-apiserver) for tests and the dev loop, and a
full local cluster on top of it (kube-controller-manager, kube-scheduler, kwok simulated nodes).

Run `python -m jobset_controller_dev.envtest` to start one in the foreground and print its
kubeconfig (`--full` for the full cluster); Ctrl-C stops it and leaves no process behind.
"""

from jobset_controller_dev.envtest.binaries import BinariesMissing, ensure_binaries
from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.nodes import NodeSpec, rack_topology

__all__ = [
    "BinariesMissing",
    "ControlPlane",
    "ControlPlaneError",
    "FullCluster",
    "NodeSpec",
    "ensure_binaries",
    "rack_topology",
]
