"""Gang scheduling (KEP-969, gate JobSetWorkloadAwareSchedulingAPI): the thin shell around the
pure decisions of ``reconcile.gang``.

- ``scheduling_api_served``: one discovery request at start (only with the gate on) says whether
  the API server serves scheduling.k8s.io/v1beta1 Workloads and PodGroups (Kubernetes >= 1.37
  with the GenericWorkload gate and the v1beta1 API enabled). When it does not, no informer is
  started for them (a list of a missing resource would fail forever and keep the caches from
  syncing) and every pass sees ``Snapshot.scheduling_api`` False: a JobSet with
  ``spec.scheduling`` then gets a ``WorkloadAPIUnavailable`` Warning event, never a retried error.
- ``build_scheduling_informers``: the Workloads and PodGroups a JobSet controls, indexed by the
  owner's UID and trimmed to their identity, owners and scheduling policy (what reconcile reads);
  any change wakes the owning JobSet, so a deleted PodGroup is recreated at once. A PodGroup also
  keeps kube-scheduler's ``PodGroupInitiallyScheduled`` condition (type, status, reason,
  message): reconcile turns "Unschedulable" into a ``PodGroupUnschedulable`` event on the JobSet.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from jobset_controller.controller.informers import OWNER_UID, jobset_owner, owner_uid_index
from jobset_controller.controller.resources import POD_GROUPS, WORKLOADS
from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.informer import Handlers, Informer, Obj
from jobset_controller.runtime.resources import Resource

_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "ownerReferences",
    # A PodGroup stays Terminating while pods name it (the podgroup-protection finalizer):
    # reconcile must not delete it again on every pass of a suspended JobSet.
    "deletionTimestamp",
)
_KEPT_CONDITION = ("type", "status", "reason", "message")
# kube-scheduler's condition on a PodGroup (k8s.io/api scheduling/v1beta1). Spelled here, not
# imported from reconcile.gang: the shell loads before /readyz, the pure reconcile (and
# pydantic behind it) only after (tests/unit/manager/test_start_imports.py).
POD_GROUP_SCHEDULED_CONDITION = "PodGroupInitiallyScheduled"


async def scheduling_api_served(client: KubeClient) -> bool:
    """Whether the API server lists both ``workloads`` and ``podgroups`` in
    scheduling.k8s.io/v1beta1 (any error, 404 included, means no)."""
    try:
        listing = await client.get(WORKLOADS.group_version_path)
    except ApiError:
        return False
    names = {str(entry.get("name")) for entry in listing.get("resources") or ()}
    return {WORKLOADS.plural, POD_GROUPS.plural} <= names


def trim_scheduling_object(obj: Obj) -> Obj:
    """Identity, owners, the spec's scheduling policy / templates (minCount patches), and the
    scheduler's ``PodGroupInitiallyScheduled`` condition when there is one (without its times,
    which reconcile never reads). Everything else (managedFields, other conditions, claim
    statuses) is dropped: the cache holds one entry per PodGroup of every gang-scheduled JobSet."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    kept_spec = {
        key: spec[key]
        for key in ("schedulingPolicy", "podGroupTemplates", "workloadRef")
        if key in spec
    }
    trimmed: Obj = {
        "metadata": {key: meta[key] for key in _KEPT_METADATA if key in meta},
        "spec": kept_spec,
    }
    conditions = [
        {key: condition[key] for key in _KEPT_CONDITION if key in condition}
        for condition in (obj.get("status") or {}).get("conditions") or ()
        if isinstance(condition, dict) and condition.get("type") == POD_GROUP_SCHEDULED_CONDITION
    ]
    if conditions:
        trimmed["status"] = {"conditions": conditions}
    return trimmed


def build_scheduling_informers(
    client: KubeClient,
    enqueue: Callable[[str], None],
    *,
    clock: Clock | None = None,
    rng: RandomSource = random,
) -> tuple[Informer, Informer]:
    """The Workload and PodGroup informers (JobSet-owned objects only)."""

    def enqueue_owner(obj: Obj) -> None:
        owner = jobset_owner(obj)
        namespace = (obj.get("metadata") or {}).get("namespace")
        if owner.get("name") and namespace:
            enqueue(f"{namespace}/{owner['name']}")

    def informer(resource: Resource) -> Informer:
        return Informer(
            client,
            resource,
            transform=trim_scheduling_object,
            keep=lambda obj: bool(jobset_owner(obj)),
            indexers={OWNER_UID: owner_uid_index},
            handlers=Handlers(
                on_add=enqueue_owner,
                on_update=lambda old, new: enqueue_owner(new),
                on_delete=enqueue_owner,
            ),
            clock=clock,
            rng=rng,
        )

    return informer(WORKLOADS), informer(POD_GROUPS)
