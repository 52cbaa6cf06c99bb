"""Every API permission the controller uses, declared once, next to the code that needs it.

Why a declaration in code: the shipped ClusterRole and Role (manifests/rbac/role.yaml and the Helm
chart's rule files) are generated from these tuples by ``python -m jobset_controller_dev.rbacgen``
and a unit test keeps them equal, so a grant cannot drift from the code. An integration test runs
the controller as a ServiceAccount bound only to the shipped roles, reads the API server's audit
log, and fails on any grant nothing used (and on any request that was refused). A new API call is
added here together with the feature that makes it, and with a line saying why.

Upstream's role grants 57 verbs; most were never used by this controller (pods, nodes, services
update/delete, core events, JobSet create/update, webhook configuration updates). The placement
and certificate features bring their own grants when they land.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class Grant:
    """Verbs on one resource (``jobs``, ``jobsets/status``) of one API group ("" is core)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str

    def rule(self) -> dict[str, Any]:
        return {"apiGroups": [self.group], "resources": [self.resource], "verbs": list(self.verbs)}


# The ClusterRole: JobSets and their children in every namespace.
CLUSTER_GRANTS: Final[tuple[Grant, ...]] = (
    Grant(
        "jobset.x-k8s.io",
        "jobsets",
        ("delete", "list", "watch"),
        "the JobSet informer; delete when ttlSecondsAfterFinished expires (executor)",
    ),
    Grant(
        "jobset.x-k8s.io",
        "jobsets/status",
        ("update",),
        "the one status write per pass, with the snapshot's resourceVersion (executor)",
    ),
    Grant(
        "batch",
        "jobs",
        ("create", "delete", "list", "patch", "watch"),
        "the Job informer; create missing children, delete on restart and when finished, "
        "merge-patch suspend/resume and elastic sizes (executor)",
    ),
    Grant(
        "batch",
        "jobs/status",
        ("patch",),
        "clear status.startTime before resuming a Job with a new pod template (executor)",
    ),
    Grant(
        "",
        "services",
        ("create", "list", "watch"),
        "the headless Service for pod DNS: informer, create when missing (executor)",
    ),
    Grant(
        "",
        "persistentvolumeclaims",
        ("create", "get", "list", "watch"),
        "volumeClaimPolicies: informer, create claims (executor); get by name when the "
        "validating webhook checks a claim's owner (manager)",
    ),
    Grant(
        "events.k8s.io",
        "events",
        ("create", "patch"),
        "events about JobSets; repeats become a series patch (runtime.events)",
    ),
)

# The Role in the controller's own namespace: the leader-election Lease.
NAMESPACE_GRANTS: Final[tuple[Grant, ...]] = (
    Grant(
        "coordination.k8s.io",
        "leases",
        ("create", "get", "update"),
        "leader election: read the Lease, create it the first time, renew or take it over "
        "(runtime.leaderelection)",
    ),
)


def rules(grants: tuple[Grant, ...]) -> list[dict[str, Any]]:
    """RBAC ``rules`` for a ClusterRole or Role, one rule per grant, in declaration order."""
    return [grant.rule() for grant in grants]
