"""The derived view of a snapshot, built once at the top of a pass and shared by every step.

Steps take the view (what the pass saw) and the status draft (what it decided so far) and return
values; none of them re-derives buckets or counts, and none mutates the view.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from jobset_controller.api import FeatureGates, JobSet
from jobset_controller.reconcile.classify import Children
from jobset_controller.reconcile.counts import ReplicatedJobCounts


@dataclass(frozen=True)
class JobSetView:
    """What one pass saw.

    Attributes:
        jobset: The JobSet with admission's defaults applied in memory.
        children: Its child Jobs, sorted into buckets.
        counts: This pass's counts per replicatedJob name.
        replicas: Replicas per replicatedJob name.
        features: The feature gates.
        now: The pass's time.
        pod_webhooks: The pod webhooks are active (``Snapshot.pod_webhooks``).
    """

    jobset: JobSet
    children: Children
    counts: Mapping[str, ReplicatedJobCounts]
    replicas: Mapping[str, int]
    features: FeatureGates
    now: datetime
    pod_webhooks: bool = False

    @property
    def suspended(self) -> bool:
        """The JobSet is suspended (``jobset_is_suspended``)."""
        return jobset_is_suspended(self.jobset)


def jobset_is_suspended(js: JobSet) -> bool:
    """``spec.suspend`` is true (unset reads as false).

    The one reading of a JobSet's suspension: the pass's decisions (``JobSetView.suspended``) and
    the ``spec.suspend`` of every Job it creates both come from here, so they cannot disagree. A
    child Job's own ``spec.suspend`` is read by ``jobs.is_suspended``.
    """
    return js.spec.suspend is True
