"""The pure core of the JobSet controller: ``reconcile(snapshot) -> Plan``.

Bring your own I/O. The caller takes a ``Snapshot`` from its caches (the JobSet, its child Jobs,
the headless Service if any, the time, the feature gates), calls ``reconcile``, and executes the
returned ``Plan``: deletes, patches, Service, PVCs, creates, and last the one status write, after
which the status-gated events are emitted.

Rules
-----

* Pure: no I/O, no clock (``now`` is an input), no randomness, no globals, no import of our
  packages other than ``jobset_controller.api``. The same snapshot always gives the same Plan.
* Level-triggered: everything is recomputed from the snapshot; nothing depends on which watch
  event caused the pass.
* A steady JobSet gives an empty Plan: the status is written only when it changed (compared
  semantically, ``replicatedJobsStatus`` order-insensitive), and no write is planned for what
  already is. The one exception is upstream's own: a running JobSet with volumeClaimPolicies
  sends its PVCs every pass (the executor ignores AlreadyExists), because PVCs are not watched.
* Every label key, condition type, reason, message and event reason is upstream's, spelled
  exactly (``catalogue``).

Theory of operation
-------------------

A pass follows the order of spec 3.3, written out in ``reconcile.reconcile``'s module: skip when
being deleted or managed by another controller; default the JobSet in memory; sort the child Jobs
into previous / active / succeeded / failed (``classify``); count them (``counts``); then a
finished JobSet only deletes its active Jobs and applies its TTL (``ttl``); a running one deletes
its previous Jobs, marks JobsReady, lets the failure policy (``failure_policy``) win over the
success policy (``success_policy``), then ensures the Service (``service``), PVCs (``volumes``),
elastic sizes (``elastic``), missing Jobs (``job_creation`` with ``depends_on`` and
``startup_order``) and suspension (``suspend``). Each step takes the frozen view of the snapshot
(``view``) and the status draft (``draft``) and returns values; conditions are written by the
table in ``conditions``. The status is rendered and compared last (``status``).

Our additions, where upstream has a reconcile error or no behaviour
-------------------------------------------------------------------

* Defaults in memory: the snapshot's JobSet is defaulted as admission would (``default_jobset``)
  before anything reads it, so a JobSet that bypassed the mutating webhook runs as if it had
  been admitted (a Service when DNS hostnames default to on, Indexed Jobs...). Defaults are never
  written back to the spec.
* Invalid JobSets fail: when admission's CREATE rules (``validate_create``, without the
  feature-gate and existing-PVC checks) find errors, the JobSet creates nothing and gets
  ``Failed=True`` with reason ``ValidationFailed``, a message listing the errors (field path and
  reason, within the 32768-byte limit), ``terminalState: Failed`` and a Warning event
  ``ValidationFailed`` with the same text after the status write.
* ``failurePolicy.restartStrategy: InPlaceRestart`` is out of scope: the JobSet fails the same way
  with reason ``InPlaceRestartNotSupported``.
* An unreadable child Job (a missing or non-integer ``restart-attempt`` label; with the RestartJob
  gate also ``replicatedjob-name``, ``job-index``, ``job-restart-attempt``, an index out of range;
  no name or uid) stops the pass: a Warning event ``InvalidChildJob`` naming the Job and the
  problem, emitted at once, and no write. Upstream returns an error and retries; here the fix
  (or deletion) of the Job triggers the next pass through the Job watch.
* A RestartJob / RestartJobAndIgnoreMaxRestarts action that fires while the RestartJob gate is
  off emits a Warning event ``FeatureGateDisabled`` and writes nothing (upstream: error, retry).
* Jobs that are being deleted are neither deleted again nor patched.
* Creates and deletes are bounded per pass (500 each); the rest follow in the next pass.

Deliberately not handled: in-place restart (see above), the pod webhook's leader/follower
placement (the controller writes equivalent affinity terms into the Job, see ``placement``),
KEP-1150 mutable resources and KEP-1282 execution attempts (not implemented upstream either).
"""

from jobset_controller.reconcile import catalogue
from jobset_controller.reconcile.catalogue import (
    ALL_JOBS_COMPLETED_MESSAGE,
    ALL_JOBS_COMPLETED_REASON,
    DEFAULT_FAILURE_POLICY_REASON,
    FAIL_JOBSET_ACTION_MESSAGE,
    FAIL_JOBSET_ACTION_REASON,
    FAILED_JOBS_MESSAGE,
    FAILED_JOBS_REASON,
    FAILURE_POLICY_REASON_PREFIX,
    FEATURE_GATE_DISABLED_EVENT,
    HEADLESS_SERVICE_CREATION_FAILED_EVENT,
    IN_ORDER_STARTUP_POLICY_COMPLETED_MESSAGE,
    IN_ORDER_STARTUP_POLICY_COMPLETED_REASON,
    IN_ORDER_STARTUP_POLICY_IN_PROGRESS_MESSAGE,
    IN_ORDER_STARTUP_POLICY_IN_PROGRESS_REASON,
    IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE,
    IN_PLACE_RESTART_NOT_SUPPORTED_REASON,
    INVALID_CHILD_JOB_EVENT,
    JOB_CREATION_FAILED_EVENT,
    JOBS_READY_MESSAGE,
    JOBS_READY_REASON,
    JOBSET_COMPLETED_MESSAGE,
    JOBSET_COMPLETED_REASON,
    JOBSET_FAILED_MESSAGE,
    JOBSET_FAILED_REASON,
    JOBSET_SUSPENDED_MESSAGE,
    JOBSET_SUSPENDED_REASON,
    NORMAL,
    PVC_CREATION_FAILED_EVENT,
    REACHED_MAX_RESTARTS_MESSAGE,
    REACHED_MAX_RESTARTS_REASON,
    RESTART_JOB_ACTION_EVENT,
    RESTART_JOB_ACTION_MESSAGE,
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT,
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE,
    RESTART_JOBSET_ACTION_EVENT,
    RESTART_JOBSET_ACTION_MESSAGE,
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT,
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE,
    RESUME_JOBS_MESSAGE,
    RESUME_JOBS_REASON,
    SUSPENDED_JOBS_MESSAGE,
    SUSPENDED_JOBS_REASON,
    VALIDATION_FAILED_REASON,
    WARNING,
    job_creation_failed_message,
    with_first_failed_job,
)
from jobset_controller.reconcile.plan import Event, JobDelete, JobPatch, Plan
from jobset_controller.reconcile.reconcile import reconcile
from jobset_controller.reconcile.snapshot import Snapshot

__all__ = [
    "ALL_JOBS_COMPLETED_MESSAGE",
    "ALL_JOBS_COMPLETED_REASON",
    "DEFAULT_FAILURE_POLICY_REASON",
    "FAILED_JOBS_MESSAGE",
    "FAILED_JOBS_REASON",
    "FAILURE_POLICY_REASON_PREFIX",
    "FAIL_JOBSET_ACTION_MESSAGE",
    "FAIL_JOBSET_ACTION_REASON",
    "FEATURE_GATE_DISABLED_EVENT",
    "HEADLESS_SERVICE_CREATION_FAILED_EVENT",
    "INVALID_CHILD_JOB_EVENT",
    "IN_ORDER_STARTUP_POLICY_COMPLETED_MESSAGE",
    "IN_ORDER_STARTUP_POLICY_COMPLETED_REASON",
    "IN_ORDER_STARTUP_POLICY_IN_PROGRESS_MESSAGE",
    "IN_ORDER_STARTUP_POLICY_IN_PROGRESS_REASON",
    "IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE",
    "IN_PLACE_RESTART_NOT_SUPPORTED_REASON",
    "JOBSET_COMPLETED_MESSAGE",
    "JOBSET_COMPLETED_REASON",
    "JOBSET_FAILED_MESSAGE",
    "JOBSET_FAILED_REASON",
    "JOBSET_SUSPENDED_MESSAGE",
    "JOBSET_SUSPENDED_REASON",
    "JOBS_READY_MESSAGE",
    "JOBS_READY_REASON",
    "JOB_CREATION_FAILED_EVENT",
    "NORMAL",
    "PVC_CREATION_FAILED_EVENT",
    "REACHED_MAX_RESTARTS_MESSAGE",
    "REACHED_MAX_RESTARTS_REASON",
    "RESTART_JOBSET_ACTION_EVENT",
    "RESTART_JOBSET_ACTION_MESSAGE",
    "RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT",
    "RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE",
    "RESTART_JOB_ACTION_EVENT",
    "RESTART_JOB_ACTION_MESSAGE",
    "RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT",
    "RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE",
    "RESUME_JOBS_MESSAGE",
    "RESUME_JOBS_REASON",
    "SUSPENDED_JOBS_MESSAGE",
    "SUSPENDED_JOBS_REASON",
    "VALIDATION_FAILED_REASON",
    "WARNING",
    "Event",
    "JobDelete",
    "JobPatch",
    "Plan",
    "Snapshot",
    "catalogue",
    "job_creation_failed_message",
    "reconcile",
    "with_first_failed_job",
]
