"""The one output of ``reconcile``: what the executor must do, as a small validated value.

Why a value instead of calls: reconcile decides, the executor acts. The executor applies a Plan
in a fixed order (deletes, patches, Service, PVCs, creates, then the status write last) and stops at
the first hard error; events with ``after_status=True`` are emitted only once the status write has
succeeded. A Plan that cannot be carried out correctly cannot be built: the invariants below are
checked on construction, and breaking one is a bug in reconcile, never the user's fault.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

EVENT_TYPES: Final = frozenset({"Normal", "Warning"})
# Words of JobPatch.reason; a patch that does two things names both, joined by "+".
PATCH_REASONS: Final = frozenset({"suspend", "resume", "elastic"})


@dataclass(frozen=True)
class JobDelete:
    """Delete one child Job with propagationPolicy Foreground and a UID precondition.

    The UID precondition makes the delete miss (404/409, both harmless) when a Job of the same
    name was recreated since the snapshot was taken.
    """

    name: str
    uid: str

    def __post_init__(self) -> None:
        if not self.name or not self.uid:
            raise ValueError(f"JobDelete needs a name and a uid, got {self.name!r}/{self.uid!r}")


@dataclass(frozen=True)
class JobPatch:
    """A JSON merge patch of one child Job's spec/metadata.

    Attributes:
        name: The Job's name.
        uid: The Job's UID (for logs, and for a precondition if the executor wants one).
        resource_version: The version the decision was based on. It is valid for the first write
            only: clearing ``status.startTime`` changes it.
        patch: The merge patch, e.g. ``{"spec": {"suspend": True}}``. For a resume it holds the
            merged pod template fields that changed plus ``suspend: False``.
        clear_start_time: First merge-patch ``/status`` with ``{"status": {"startTime": None}}``
            (the Job API forbids template changes on a Job that has started).
        reason: ``suspend``, ``resume``, ``elastic`` or two of them joined by ``+`` (for logs).
    """

    name: str
    uid: str
    resource_version: str
    patch: Mapping[str, Any]
    clear_start_time: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("JobPatch needs a name")
        if not self.patch:
            raise ValueError(f"JobPatch of {self.name} has an empty patch")
        words = self.reason.split("+") if self.reason else []
        if any(word not in PATCH_REASONS for word in words):
            raise ValueError(f"JobPatch of {self.name} has an unknown reason {self.reason!r}")


@dataclass(frozen=True)
class Event:
    """An event about the JobSet (``regarding`` the JobSet, ``related`` unset).

    Attributes:
        type: ``Normal`` or ``Warning``.
        reason: The event reason (CamelCase, part of the contract).
        note: The human-readable message.
        after_status: Emit only after the Plan's status write succeeds (condition changes and
            failure policy actions); False means emit at once (reconcile errors).
    """

    type: str
    reason: str
    note: str
    after_status: bool

    def __post_init__(self) -> None:
        if self.type not in EVENT_TYPES:
            raise ValueError(f"event type must be Normal or Warning, got {self.type!r}")
        if not self.reason:
            raise ValueError("event reason must not be empty")


@dataclass(frozen=True)
class Plan:
    """Everything one reconcile pass wants done, applied by the executor in a fixed order.

    Attributes:
        jobs_to_create: Complete Job manifests (apiVersion batch/v1, kind Job, metadata with
            ownerReferences, labels and annotations; spec).
        jobs_to_delete: Jobs to delete (foreground, UID precondition).
        jobs_to_patch: Merge patches of Jobs (suspend, resume, elastic); at most one per Job.
        service_to_create: The headless Service manifest, when it is missing.
        pvcs_to_create: PVC manifests from volumeClaimPolicies; sent every pass of a running
            JobSet, as upstream does, and the executor ignores AlreadyExists.
        status: The complete new ``.status``, or None when it is unchanged. Written with an
            UPDATE of the status subresource (full replacement, so keys left out disappear)
            using the snapshot's resourceVersion; a conflict means "reconcile again".
        events: Events to emit; those with ``after_status`` only after the status write.
        requeue_after: Seconds after which to reconcile again even without a watch event.
        delete_jobset: The TTL after finishing expired: delete the JobSet (foreground).
        completed: The status write makes the JobSet Completed for the first time (the executor
            then counts ``jobset_completed_total`` once, after a successful write).
        failed: The same for Failed and ``jobset_failed_total``.
    """

    jobs_to_create: tuple[Mapping[str, Any], ...] = ()
    jobs_to_delete: tuple[JobDelete, ...] = ()
    jobs_to_patch: tuple[JobPatch, ...] = ()
    service_to_create: Mapping[str, Any] | None = None
    pvcs_to_create: tuple[Mapping[str, Any], ...] = ()
    status: Mapping[str, Any] | None = None
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    delete_jobset: bool = False
    completed: bool = False
    failed: bool = False

    def __post_init__(self) -> None:
        if self.requeue_after is not None and self.requeue_after < 0:
            raise ValueError(f"requeue_after must not be negative, got {self.requeue_after}")
        if self.completed and self.failed:
            raise ValueError("a Plan cannot both complete and fail the JobSet")
        if (self.completed or self.failed) and self.status is None:
            raise ValueError("completed/failed need the status write that records them")
        if self.status is None and any(event.after_status for event in self.events):
            raise ValueError("events gated on the status write need a status write")
        patched = [patch.name for patch in self.jobs_to_patch]
        if len(patched) != len(set(patched)):
            raise ValueError(f"more than one patch for a Job: {sorted(patched)}")
        created = [_manifest_name(job) for job in self.jobs_to_create]
        if len(created) != len(set(created)):
            raise ValueError(f"a Job name is created twice: {sorted(created)}")

    def is_empty(self) -> bool:
        """True when the Plan asks for nothing at all: no write, no event, no requeue."""
        return self == Plan()


def _manifest_name(manifest: Mapping[str, Any]) -> str:
    metadata = manifest.get("metadata") or {}
    return str(metadata.get("name", ""))
