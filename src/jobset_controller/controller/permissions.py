"""Every API permission the controller uses, declared once, next to the code that needs it.

Why a declaration in code: the shipped ClusterRole and Role (manifests/rbac/role.yaml and the Helm
chart's rule files) are generated from these tuples by ``python -m jobset_controller_dev.rbacgen``
and a unit test keeps them equal, so a grant cannot drift from the code. An integration test runs
the controller as a ServiceAccount bound only to the shipped roles, reads the API server's audit
log, and fails on any grant nothing used (and on any request that was refused). A new API call is
added here together with the feature that makes it, and with a line saying why.

Upstream's role grants 57 verbs; this one grants only the verbs the code below makes, so several
of upstream's are absent (services update/delete, core-group events, JobSet create/update among
them). Pods and nodes are granted for exclusive placement: the pod controller's trimmed pod and
node caches, which the pod webhooks read too, the release patch, the repair (a status patch and
a delete) and the placement-mode probe's dry-run creates (controller.pods,
controller.placement_mode); only the verbs those make.

``resource_names`` narrows a grant to named objects where the verbs allow it (get, list, watch,
update, patch, delete; list and watch only with a ``metadata.name`` field selector, which is how
the certificate rotator watches). Create cannot be narrowed: the name is not known when the
request is authorised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.controller.webhookcerts import (
    MUTATING_WEBHOOK_CONFIGURATION,
    VALIDATING_WEBHOOK_CONFIGURATION,
)


@dataclass(frozen=True)
class Grant:
    """Verbs on one resource (``jobs``, ``jobsets/status``) of one API group ("" is core)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    resource_names: tuple[str, ...] = ()
    # What the API server must offer before the grant can be used ("" for every supported
    # cluster); the least-privilege test on the pinned version skips grants that need more.
    needs: str = ""

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": [self.resource]}
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        rule["verbs"] = list(self.verbs)
        return rule


# Kubernetes >= 1.37 with GenericWorkload and scheduling.k8s.io/v1beta1 served (KEP-969).
GANG_SCHEDULING_API: Final = "scheduling.k8s.io/v1beta1 (Kubernetes >= 1.37)"

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
    Grant(
        "",
        "pods",
        ("create", "delete", "list", "patch", "watch"),
        "exclusive placement: the trimmed pod cache of leader/follower Jobs (controller.pods; "
        "also every failed or terminating JobSet pod, and with the InPlaceRestart gate every "
        "JobSet pod, for the in-place pass); release a gated follower with its leader's "
        "nodeSelector (patch); delete a misplaced follower, and force-delete a pod stuck "
        "terminating on an unreachable node; create only with dryRun=All, probing whether the "
        "API server calls the pod webhooks (controller.placement_mode)",
    ),
    Grant(
        "",
        "pods/status",
        ("patch",),
        "the DisruptionTarget condition (ExclusivePlacementViolation) on a misplaced follower "
        "before it is deleted, and Failed with DisruptionTarget (DeletionByJobSetController) "
        "on a pod stuck on an unreachable node before it is force-deleted (controller.pods)",
    ),
    Grant(
        "",
        "nodes",
        ("list", "watch"),
        "exclusive placement: node labels (the leader's topology domain), a trimmed cache read "
        "by the pod webhooks and the pod controller; the unreachable/not-ready taints of a "
        "node a stuck pod is on (controller.pods)",
    ),
    Grant(
        "scheduling.k8s.io",
        "workloads",
        ("create", "delete", "list", "patch", "watch"),
        "gang scheduling (JobSetWorkloadAwareSchedulingAPI): the Workload informer; create one "
        "per JobSet, delete on suspend, merge-patch minCount on elastic changes (executor)",
        needs=GANG_SCHEDULING_API,
    ),
    Grant(
        "scheduling.k8s.io",
        "podgroups",
        ("create", "delete", "list", "patch", "watch"),
        "gang scheduling (JobSetWorkloadAwareSchedulingAPI): the PodGroup informer; create the "
        "JobSet's PodGroups, delete on suspend, merge-patch minCount on elastic changes "
        "(executor)",
        needs=GANG_SCHEDULING_API,
    ),
    Grant(
        "authentication.k8s.io",
        "tokenreviews",
        ("create",),
        "secure /metrics: who a scraper's bearer token belongs to (runtime.metricsauth)",
    ),
    Grant(
        "authorization.k8s.io",
        "subjectaccessreviews",
        ("create",),
        "secure /metrics: whether that user may get /metrics (runtime.metricsauth)",
    ),
    Grant(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        ("list", "update", "watch"),
        "internal certificates: watch our one configuration by name and keep its caBundle "
        "current (runtime.certrotator)",
        resource_names=(MUTATING_WEBHOOK_CONFIGURATION,),
    ),
    Grant(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        ("list", "update", "watch"),
        "internal certificates: watch our one configuration by name and keep its caBundle "
        "current (runtime.certrotator)",
        resource_names=(VALIDATING_WEBHOOK_CONFIGURATION,),
    ),
)

# The Role in the controller's own namespace (named leader-election-role, like upstream's): the
# leader-election Lease and the webhook certificate Secret.
NAMESPACE_GRANTS: Final[tuple[Grant, ...]] = (
    Grant(
        "coordination.k8s.io",
        "leases",
        ("create", "get", "update"),
        "leader election: read the Lease, create it the first time, renew or take it over "
        "(runtime.leaderelection)",
    ),
    Grant(
        "",
        "secrets",
        ("create", "list", "update", "watch"),
        "internal certificates: watch the webhook Secret (by field selector), create it when "
        "missing, rotate it with a resourceVersion precondition (runtime.certrotator); not "
        "narrowed by name because the Secret's name is configurable and create cannot be",
    ),
)


def rules(grants: tuple[Grant, ...]) -> list[dict[str, Any]]:
    """RBAC ``rules`` for a ClusterRole or Role, one rule per grant, in declaration order."""
    return [grant.rule() for grant in grants]


# Not the controller's: what a scraper (Prometheus's ServiceAccount) needs for secure /metrics,
# shipped as the `metrics-reader` ClusterRole for users to bind. The path and verb are what
# runtime.metricsauth asks the SubjectAccessReview about.
METRICS_READER_RULES: Final[tuple[dict[str, Any], ...]] = (
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
)
