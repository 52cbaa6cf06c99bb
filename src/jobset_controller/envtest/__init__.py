"""A real local Kubernetes control plane (etcd + kube-apiserver) for tests and the dev loop.

Run `python -m jobset_controller.envtest` (or `jobset-controller envtest`) to start one in the
foreground and print its kubeconfig; Ctrl-C stops it and leaves no process behind.
"""

from jobset_controller.envtest.binaries import BinariesMissing, ensure_binaries
from jobset_controller.envtest.controlplane import ControlPlane, ControlPlaneError

__all__ = ["BinariesMissing", "ControlPlane", "ControlPlaneError", "ensure_binaries"]
