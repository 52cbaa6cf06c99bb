"""The resources the JobSet controller reconciles, caches and creates: the one place their API
group, version and plural are written. Paths come from `Resource.path` (runtime/resources.py);
the JobSet's own coordinates come from the API package's constants.
"""

from __future__ import annotations

from typing import Final

from jobset_controller.api import GROUP, PLURAL, VERSION
from jobset_controller.runtime.resources import PODS, Resource

JOBSETS: Final = Resource(GROUP, VERSION, PLURAL)
JOBS: Final = Resource("batch", "v1", "jobs")
SERVICES: Final = Resource("", "v1", "services")
PVCS: Final = Resource("", "v1", "persistentvolumeclaims")
NODES: Final = Resource("", "v1", "nodes")
# Gang scheduling (KEP-969): Kubernetes >= 1.37 with GenericWorkload and the v1beta1 API enabled.
WORKLOADS: Final = Resource("scheduling.k8s.io", "v1beta1", "workloads")
POD_GROUPS: Final = Resource("scheduling.k8s.io", "v1beta1", "podgroups")

__all__ = ["JOBS", "JOBSETS", "NODES", "PODS", "POD_GROUPS", "PVCS", "SERVICES", "WORKLOADS"]
