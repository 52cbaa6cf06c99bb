"""jobset-controller: a Kubernetes controller for the JobSet API (jobset.x-k8s.io/v1alpha2)."""

__version__ = "0.1.0"
