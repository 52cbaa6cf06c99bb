"""Which objects the JobSet controller caches, trimmed to what reconcile reads.

- JobSets: every JobSet (the objects reconciled).
- Jobs: only those labelled `jobset.sigs.k8s.io/jobset-name` (every Job this controller creates
  carries it), indexed by the UID of their JobSet controller owner, so a Job owned by another
  JobSet of the same name (another UID) is never mistaken for a child. Pod templates are cut down
  to the fields resume merges (and the gang link it checks); of the containers only their names
  and resources stay, volumes are dropped (memory per Job is a tracked benchmark figure).
- Services: only those with a JobSet controller owner are kept (Services carry no JobSet label),
  cut down to their metadata: reconcile only asks whether the headless Service exists.
- PersistentVolumeClaims: every claim, cut down to its metadata, so reconcile knows which
  volumeClaimPolicies claims exist (a steady JobSet then makes no writes). Claims may be created
  by users beforehand (with the Retain policy), so the watch is not limited to our label. A claim
  labelled with a JobSet name wakes that JobSet, so a deleted claim is recreated at once.

JobSets, Jobs and Services are held compactly (the informer's `compact`: compressed JSON, parsed on
read), so a cache of 50,000 JobSets fits a small controller (hack/bench/scale_bench.py).

Any change of a child enqueues its owner's key `namespace/name`; the reconcile is level-triggered
and recomputes everything, so which event arrived does not matter.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from jobset_controller.api import API_VERSION, JOBSET_NAME_KEY, KIND
from jobset_controller.controller.resources import JOBS, JOBSETS, PVCS, SERVICES
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.informer import (
    Handlers,
    Informer,
    Obj,
    controller_owner,
    object_key,
    strip_managed_fields,
)

OWNER_UID = "owner-uid"

# schedulingGroup: the PodGroup a gang-scheduled Job's pods name; a resume compares it with the
# one the spec gives the Job now and recreates the Job when they differ (reconcile.gang).
_POD_SPEC_FIELDS = (
    "nodeSelector",
    "tolerations",
    "schedulingGates",
    "subdomain",
    "schedulingGroup",
)
_CONTAINER_LISTS = ("containers", "initContainers")
_JOB_SPEC_FIELDS = ("parallelism", "completions", "completionMode", "suspend", "backoffLimit")


def jobset_owner(obj: Obj) -> dict[str, Any]:
    return controller_owner(obj, api_version=API_VERSION, kind=KIND)


def owner_uid_index(obj: Obj) -> list[str]:
    uid = jobset_owner(obj).get("uid")
    return [str(uid)] if uid else []


def trim_job(job: Obj) -> Obj:
    """Keep metadata, the spec fields reconcile reads, the pod template's merge fields (with each
    container's name and resources), status.

    The Job's own annotations are dropped: reconcile reads a child's labels, never its
    annotations (which repeat the same twelve JobSet keys), and every pass parses every cached
    child of its JobSet, so they cost a fifth of each parse (hack/bench/cpu_bench.py, 1x1000).
    The pod template's annotations stay: resuming merges the JobSet's into them.
    """
    strip_managed_fields(job)
    meta = job.get("metadata")
    if isinstance(meta, dict):
        meta.pop("annotations", None)
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    trimmed_spec: dict[str, Any] = {k: spec[k] for k in _JOB_SPEC_FIELDS if k in spec}
    trimmed_pod_spec = {k: pod_spec[k] for k in _POD_SPEC_FIELDS if k in pod_spec}
    for key in _CONTAINER_LISTS:
        containers = pod_spec.get(key)
        if isinstance(containers, list):
            trimmed_pod_spec[key] = [_container_resources(c) for c in containers]
    trimmed_spec["template"] = {
        "metadata": template.get("metadata") or {},
        "spec": trimmed_pod_spec,
    }
    return {
        "apiVersion": job.get("apiVersion", "batch/v1"),
        "kind": job.get("kind", "Job"),
        "metadata": job.get("metadata") or {},
        "spec": trimmed_spec,
        "status": job.get("status") or {},
    }


def _container_resources(container: Any) -> dict[str, Any]:
    """A container as resume reads it: its name and resources (KEP-1150 carries resource
    changes of a suspended JobSet into its Jobs, matched by container name)."""
    if not isinstance(container, dict):
        return {}
    kept = {"name": container.get("name")}
    if container.get("resources"):
        kept["resources"] = container["resources"]
    return kept


def trim_to_metadata(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp")
    return {"metadata": {k: meta[k] for k in kept if k in meta}}


def trim_service(obj: Obj) -> Obj:
    """What reconcile and the owner index read of a Service: its identity and owners."""
    meta = obj.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "ownerReferences", "deletionTimestamp")
    return {"metadata": {k: meta[k] for k in kept if k in meta}}


def owned_by_jobset(obj: Obj) -> bool:
    return bool(jobset_owner(obj))


def build_informers(
    client: KubeClient,
    enqueue: Callable[[str], None],
    *,
    clock: Clock | None = None,
    rng: RandomSource = random,
    job_seen: Callable[[str, str], None] = lambda key, name: None,
) -> tuple[Informer, Informer, Informer, Informer]:
    """JobSets, Jobs, Services and PVCs, with handlers that enqueue JobSet keys; every informer
    runs on ``clock`` and draws its jitter from ``rng`` (the manager's, so tests can step them).
    Every event of a Job owned by a JobSet also calls ``job_seen(jobset key, job name)`` before
    the key is enqueued (the controller's create expectations)."""

    def enqueue_self(obj: Obj) -> None:
        enqueue(object_key(obj))

    def owner_key(obj: Obj) -> str | None:
        owner = jobset_owner(obj)
        namespace = (obj.get("metadata") or {}).get("namespace")
        return f"{namespace}/{owner['name']}" if owner.get("name") and namespace else None

    def enqueue_owner(obj: Obj) -> None:
        if key := owner_key(obj):
            enqueue(key)

    def enqueue_job_owner(obj: Obj) -> None:
        if key := owner_key(obj):
            job_seen(key, str(obj["metadata"].get("name", "")))
            enqueue(key)

    def enqueue_labelled(obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(JOBSET_NAME_KEY)
        if owner and meta.get("namespace"):
            enqueue(f"{meta['namespace']}/{owner}")

    def calling(enqueue_for: Callable[[Obj], None]) -> Handlers:
        """Every change of an object (the new state for updates) goes to `enqueue_for`."""
        return Handlers(
            on_add=enqueue_for,
            on_update=lambda old, new: enqueue_for(new),
            on_delete=enqueue_for,
        )

    jobsets = Informer(
        client, JOBSETS, compact=True, handlers=calling(enqueue_self), clock=clock, rng=rng
    )
    jobs = Informer(
        client,
        JOBS,
        label_selector=JOBSET_NAME_KEY,
        compact=True,
        transform=trim_job,
        indexers={OWNER_UID: owner_uid_index},
        handlers=calling(enqueue_job_owner),
        clock=clock,
        rng=rng,
    )
    services = Informer(
        client,
        SERVICES,
        compact=True,
        transform=trim_service,
        keep=owned_by_jobset,
        indexers={OWNER_UID: owner_uid_index},
        handlers=calling(enqueue_owner),
        clock=clock,
        rng=rng,
    )
    pvcs = Informer(
        client,
        PVCS,
        transform=trim_to_metadata,
        handlers=Handlers(
            on_add=lambda obj: None,
            on_update=lambda old, new: None,
            on_delete=enqueue_labelled,
        ),
        clock=clock,
        rng=rng,
    )
    return jobsets, jobs, services, pvcs
