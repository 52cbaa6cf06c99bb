"""The one output of ``reconcile``: what the executor must do, as a small validated value.

Why a value instead of calls: reconcile decides, the executor acts. The executor writes the child
objects phase by phase in ``WRITE_ORDER``, then the status (last, so it records only what was
done), and stops at the first hard error; events with ``after_status=True`` are emitted only once
the status write has succeeded. A Plan that cannot be carried out correctly cannot be built: the
invariants below are checked on construction, and breaking one is a bug in reconcile, never the
user's fault.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, get_args

from jobset_controller.reconcile.catalogue import EventType

EVENT_TYPES: Final = frozenset(get_args(EventType))
# Words of JobPatch.reason; a patch that does two things names both, joined by "+".
PATCH_REASONS: Final = frozenset({"suspend", "resume", "elastic"})


class WritePhase(enum.Enum):
    """One kind of child-object write of a Plan; ``WRITE_ORDER`` says when each runs."""

    DELETE_JOBS = "jobs_to_delete"
    DELETE_SCHEDULING = "scheduling_to_delete"
    CREATE_SERVICE = "service_to_create"
    CREATE_PVCS = "pvcs_to_create"
    CREATE_WORKLOAD = "workload_to_create"
    CREATE_POD_GROUPS = "pod_groups_to_create"
    PATCH_SCHEDULING = "scheduling_to_patch"
    CREATE_JOBS = "jobs_to_create"
    PATCH_JOBS = "jobs_to_patch"


# The order in which the executor writes a Plan's child objects; the status write follows them.
# This tuple is the only statement of the order: the executor iterates it and its test asserts it.
# - Deletes first: a restart replaces Jobs by Jobs of the same names, which can be created only
#   once the old ones are gone, so their deletion starts as early as possible.
# - The Service and the claims before the Jobs: pods must find their DNS records and volumes.
# - Gang scheduling (KEP-969): a suspend deletes the Workload and PodGroups with the other
#   deletes; the Workload, then its PodGroups, then their minCount patches come before the Jobs,
#   so no pod ever names a PodGroup the scheduler cannot find (KEP-5547's creation order).
# - Patches touch only Jobs that already exist; they close the child writes.
WRITE_ORDER: Final[tuple[WritePhase, ...]] = (
    WritePhase.DELETE_JOBS,
    WritePhase.DELETE_SCHEDULING,
    WritePhase.CREATE_SERVICE,
    WritePhase.CREATE_PVCS,
    WritePhase.CREATE_WORKLOAD,
    WritePhase.CREATE_POD_GROUPS,
    WritePhase.PATCH_SCHEDULING,
    WritePhase.CREATE_JOBS,
    WritePhase.PATCH_JOBS,
)


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
        uid: The Job's UID, identifying the Job the decision was about; it is not sent, the
            resourceVersion is the precondition.
        resource_version: The version the decision was based on, sent as the precondition of
            the first write (a 409 then means "reconcile again"). Clearing ``status.startTime``
            changes it, so the template patch uses the version that write returned.
        patch: The merge patch, e.g. ``{"spec": {"suspend": True}}``. For a resume it holds the
            merged pod template fields that changed plus ``suspend: False``.
        clear_start_time: First merge-patch ``/status`` with ``{"status": {"startTime": None}}``
            (the Job API forbids template changes on a Job that has started).
        reason: ``suspend``, ``resume``, ``elastic`` or two of them joined by ``+`` (logged).
        strategic: Send ``patch`` as a strategic merge patch: a resume that carries container
            resources (MutablePodResourcesForSuspendedJobSets) names containers in a list merged
            by name, which a JSON merge patch would replace whole. Everything else such a patch
            holds means the same in both (maps merge; tolerations replace; schedulingGates,
            sent as a superset of the Job's, merge by name to the same list).
    """

    name: str
    uid: str
    resource_version: str
    patch: Mapping[str, Any]
    clear_start_time: bool = False
    reason: str = ""
    strategic: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("JobPatch needs a name")
        if not self.patch:
            raise ValueError(f"JobPatch of {self.name} has an empty patch")
        words = self.reason.split("+") if self.reason else []
        if any(word not in PATCH_REASONS for word in words):
            raise ValueError(f"JobPatch of {self.name} has an unknown reason {self.reason!r}")


SCHEDULING_KINDS: Final = frozenset({"Workload", "PodGroup"})


@dataclass(frozen=True)
class SchedulingWrite:
    """A delete (``patch`` None; UID precondition) or a JSON merge patch of the JobSet's Workload
    or one of its PodGroups (scheduling.k8s.io/v1beta1; docs/behaviour.md#gang-scheduling)."""

    kind: str
    name: str
    uid: str = ""
    patch: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULING_KINDS:
            raise ValueError(f"SchedulingWrite of an unknown kind {self.kind!r}")
        if not self.name:
            raise ValueError("SchedulingWrite needs a name")


@dataclass(frozen=True)
class Event:
    """An event about the JobSet (``regarding`` the JobSet, ``related`` unset).

    Attributes:
        type: ``Normal`` or ``Warning`` (also checked at run time, for callers without mypy).
        reason: The event reason (CamelCase, part of the contract).
        note: The human-readable message.
        after_status: Emit only after the Plan's status write succeeds (condition changes and
            failure policy actions); False means emit at once (reconcile errors).
    """

    type: EventType
    reason: str
    note: str
    after_status: bool

    def __post_init__(self) -> None:
        if self.type not in EVENT_TYPES:
            raise ValueError(f"event type must be Normal or Warning, got {self.type!r}")
        if not self.reason:
            raise ValueError("event reason must not be empty")


@dataclass(frozen=True)
class Restart:
    """A restart that a Plan's status write records: not a write of its own, but what the
    controller counts (``jobset_restarts_total``) and times (the restart timeline) once the
    write has succeeded (docs/behaviour.md#restart-timeline).

    Attributes:
        action: The failure policy action (``RestartJobSet``, ``RestartJob``, ...).
        reason: The first failed Job's failure reason ('' when its condition has none).
        job: The first failed Job's name.
        failed_at: Its failure condition's ``lastTransitionTime`` ('' when unreadable).
        whole_jobset: A global restart (``status.restarts`` raised: every Job is recreated),
            not a per-Job one.
        attempt: ``status.restarts`` after the write (the attempt the new Jobs belong to).
    """

    action: str
    reason: str
    job: str
    failed_at: str
    whole_jobset: bool
    attempt: int


@dataclass(frozen=True)
class Plan:
    """Everything one reconcile pass wants done, applied by the executor in ``WRITE_ORDER``.

    Attributes:
        jobs_to_create: Complete Job manifests (apiVersion batch/v1, kind Job, metadata with
            ownerReferences, labels and annotations; spec).
        jobs_to_delete: Jobs to delete (foreground, UID precondition).
        jobs_to_patch: Merge patches of Jobs (suspend, resume, elastic); at most one per Job.
        service_to_create: The headless Service manifest, when it is missing.
        pvcs_to_create: PVC manifests from volumeClaimPolicies that the snapshot does not list
            as existing (all of them when the snapshot does not know which exist); the executor
            ignores AlreadyExists, since a claim may have appeared since the snapshot.
        status: The complete new ``.status``, or None when it is unchanged. Written with an
            UPDATE of the status subresource (full replacement, so keys left out disappear).
        status_resource_version: The JobSet's resourceVersion the new status was computed from,
            the precondition of the status write: a 409 means the JobSet changed meanwhile, and
            the pass is redone from fresh state rather than overwriting what it did not see.
            None with no status write, or when the snapshot had no version (the write is then
            unconditional).
        events: Events to emit; those with ``after_status`` only after the status write.
        requeue_after: Seconds after which to reconcile again even without a watch event.
        delete_jobset: The TTL after finishing expired: delete the JobSet (foreground).
        completed: The status write makes the JobSet Completed for the first time (the executor
            then counts ``jobset_completed_total`` once, after a successful write).
        failed: The same for Failed and ``jobset_failed_total``.
        deadline_exceeded: That Failed is the active deadline's (reason DeadlineExceeded): the
            executor also counts ``jobset_active_deadline_exceeded_total`` once. Implies
            ``failed``.
        workload_to_create: Gang scheduling: the JobSet's Workload manifest, when it is missing.
        pod_groups_to_create: Gang scheduling: the PodGroup manifests that are missing.
        scheduling_to_patch: Gang scheduling: minCount merge patches (elastic changes).
        scheduling_to_delete: Gang scheduling: the Workload and PodGroups a suspend deletes.
        restart: The restart the status write records, if any (``Restart``).
    """

    jobs_to_create: tuple[Mapping[str, Any], ...] = ()
    jobs_to_delete: tuple[JobDelete, ...] = ()
    jobs_to_patch: tuple[JobPatch, ...] = ()
    service_to_create: Mapping[str, Any] | None = None
    pvcs_to_create: tuple[Mapping[str, Any], ...] = ()
    status: Mapping[str, Any] | None = None
    status_resource_version: str | None = None
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    delete_jobset: bool = False
    completed: bool = False
    failed: bool = False
    deadline_exceeded: bool = False
    workload_to_create: Mapping[str, Any] | None = None
    pod_groups_to_create: tuple[Mapping[str, Any], ...] = ()
    scheduling_to_patch: tuple[SchedulingWrite, ...] = ()
    scheduling_to_delete: tuple[SchedulingWrite, ...] = ()
    restart: Restart | None = None

    def __post_init__(self) -> None:
        if self.requeue_after is not None and self.requeue_after < 0:
            raise ValueError(f"requeue_after must not be negative, got {self.requeue_after}")
        if self.completed and self.failed:
            raise ValueError("a Plan cannot both complete and fail the JobSet")
        if (self.completed or self.failed) and self.status is None:
            raise ValueError("completed/failed need the status write that records them")
        if self.restart is not None and self.status is None:
            raise ValueError("a restart needs the status write that records it")
        if self.deadline_exceeded and not self.failed:
            raise ValueError("deadline_exceeded is counted with the failure that records it")
        if self.status is None and self.status_resource_version is not None:
            raise ValueError("a status resourceVersion without a status write")
        if self.status is None and any(event.after_status for event in self.events):
            raise ValueError("events gated on the status write need a status write")
        patched = [patch.name for patch in self.jobs_to_patch]
        if len(patched) != len(set(patched)):
            raise ValueError(f"more than one patch for a Job: {sorted(patched)}")
        if any(write.patch is None for write in self.scheduling_to_patch):
            raise ValueError("a scheduling patch without a patch")
        if any(write.patch is not None for write in self.scheduling_to_delete):
            raise ValueError("a scheduling delete with a patch")
        created = self.names_to_create()
        if len(created) != len(set(created)):
            raise ValueError(f"a Job name is created twice: {sorted(created)}")

    def names_to_create(self) -> list[str]:
        """The names of the Jobs this Plan creates, in its order."""
        return [_manifest_name(job) for job in self.jobs_to_create]

    def is_empty(self) -> bool:
        """True when the Plan asks for nothing at all: no write, no event, no requeue."""
        return self == Plan()


def _manifest_name(manifest: Mapping[str, Any]) -> str:
    metadata = manifest.get("metadata") or {}
    return str(metadata.get("name", ""))
