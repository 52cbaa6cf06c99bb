"""The one input of ``reconcile``: everything a pass may look at, taken from the caches at once.

Why a frozen value: reconcile is pure, so every fact it decides on (the JobSet, its child Jobs,
whether the headless Service exists, which claims exist, the time, the feature gates, whether
the pod webhooks are active) must be in here. Nothing is read from a clock, a cache or the
environment behind its back, and the same snapshot always gives the same Plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobset_controller.api import FeatureGates

if TYPE_CHECKING:
    from jobset_controller.api import JobSet


@dataclass(frozen=True)
class Snapshot:
    """What the controller saw when it started this pass.

    Attributes:
        jobset: The JobSet as cached, NOT defaulted. Reconcile defaults a copy in memory and never
            writes defaults back to the spec.
        jobs: The child Jobs whose controller ownerReference UID is the JobSet's UID, as raw
            wire dicts. They may be trimmed to the fields reconcile reads: metadata (name,
            namespace, uid, resourceVersion, labels, creationTimestamp, deletionTimestamp,
            ownerReferences; not annotations), spec (parallelism, completions, completionMode,
            suspend, template.metadata, template.spec.nodeSelector/tolerations/schedulingGates,
            the name and resources of each container and init container)
            and status (conditions, active, ready, succeeded, failed, startTime).
        service: The Service named after the JobSet's subdomain in its namespace, if it exists.
        now: The current time, timezone-aware.
        features: The feature gates the controller runs with.
        existing_pvcs: Names of the PersistentVolumeClaims that exist in the JobSet's namespace,
            or None when unknown. Known names are not created again, so a steady JobSet with
            volumeClaimPolicies makes no writes; None keeps upstream's create-every-pass.
        pod_webhooks: The pod webhooks are known to be active (the API server calls them): new
            exclusive Jobs are placed by leader and followers instead of affinity in every pod.
            False (the safe default) writes the affinity into the Job.
        defer_children: The Configuration's ``deferredChildren.enable``: a suspended JobSet that
            never ran gets no Jobs and no Service until its first resume
            (``reconcile.deferred``).
        pods: InPlaceRestart gate: the JobSet's pods (label ``jobset.sigs.k8s.io/jobset-name``),
            trimmed to what ``in_place_restart`` reads: name, phase, the in-place attempt
            annotation, the containers' ``restartCount``. Empty without the gate.
        scheduling_api: JobSetWorkloadAwareSchedulingAPI gate: the API server serves
            scheduling.k8s.io/v1beta1 Workloads and PodGroups (found by discovery). False: a
            JobSet with ``spec.scheduling`` gets a WorkloadAPIUnavailable event and no writes of
            them. ``plan`` simulates a cluster that serves them.
        workload: The JobSet's Workload (controller ownerReference to the JobSet), if any.
        pod_groups: The PodGroups the JobSet controls.
        failed_pods: The JobSet's pods whose phase is Failed, any attempt's, as the pod cache
            keeps them (``api.pod_status.end_facts``): what ``first_failure`` names in a
            restart's or a failure's message. Empty when unknown.
        early_job_conditions: The Configuration's ``earlyJobConditions.enable``: a Job's
            ``FailureTarget``/``SuccessCriteriaMet`` condition counts as ``Failed``/``Complete``
            (``classify``; docs/behaviour.md#early-job-conditions).
    """

    jobset: JobSet
    jobs: tuple[Mapping[str, Any], ...]
    service: Mapping[str, Any] | None
    now: datetime
    features: FeatureGates = field(default_factory=FeatureGates)
    existing_pvcs: frozenset[str] | None = None
    pod_webhooks: bool = False
    defer_children: bool = False
    pods: tuple[Mapping[str, Any], ...] = ()
    scheduling_api: bool = True
    workload: Mapping[str, Any] | None = None
    pod_groups: tuple[Mapping[str, Any], ...] = ()
    early_job_conditions: bool = False
    failed_pods: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.now.tzinfo is None or self.now.utcoffset() is None:
            raise ValueError("Snapshot.now must be timezone-aware")
        if not isinstance(self.jobs, tuple):
            raise TypeError("Snapshot.jobs must be a tuple")
