"""Where resources live in the API, and the core kinds the runtime itself reads and writes.

Why one module: an API path spelled by hand in several places drifts (a group renamed in one,
a version bumped in another) and nothing notices until a request 404s. Every path the product
sends is built by `Resource.path` from a constant defined once: here for the kinds the generic
runtime owns (the leader-election Lease, the Events it records, the reviews that guard
/metrics), and in the controller's own resources module for the kinds a controller reconciles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Resource:
    """One resource of one API group version: `/api/v1/...` or `/apis/<group>/<version>/...`."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        """The `apiVersion` an object of this resource carries (`v1` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version_path(self) -> str:
        """The group version's own path (`/api/v1`, `/apis/<group>/<version>`): what discovery
        lists its resources at."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection (all namespaces, or one), or one object when `name` is given."""
        base = self.group_version_path
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return base + (f"/{name}" if name else "")


LEASES: Final = Resource("coordination.k8s.io", "v1", "leases")
# Pods: the controllers' caches and writes (controller.resources re-exports it) and the in-place
# restart agent's own pod.
PODS: Final = Resource("", "v1", "pods")
EVENTS: Final = Resource("events.k8s.io", "v1", "events")
# Create-only reviews: who a bearer token belongs to, and whether that user may read /metrics.
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews")
SUBJECT_ACCESS_REVIEWS: Final = Resource("authorization.k8s.io", "v1", "subjectaccessreviews")
# Serving-certificate management (runtime.certrotator): the Secret holding the certificates and
# the admission webhook configurations whose caBundle it keeps current.
SECRETS: Final = Resource("", "v1", "secrets")
MUTATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
)
VALIDATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
)
