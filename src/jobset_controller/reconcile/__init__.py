"""The pure core of the JobSet controller: ``reconcile(snapshot) -> Plan``.

Where ``reconcile`` comes from: ``steps.py`` (the pass, step by step). This package imports it
on first use (the PEP 562 ``__getattr__`` below; type checkers and import-linter see the edge
through the ``TYPE_CHECKING`` import and the function-level import), not when it is imported,
and that is deliberate: ``steps`` loads the API models and pydantic (0.11-0.14 s more to import
this package, ``python -X importtime``, bytecode compiled, 2026-11-27), while the controller's
path from process start to /readyz needs only the Plan's and the Snapshot's types from here
(tests/unit/manager/test_start_imports.py fails if that path loads ``steps``). There is no
import cycle to avoid; a plain import would only put that cost before the first probe.

Bring your own I/O. The caller takes a ``Snapshot`` from its caches (the JobSet, its child Jobs,
the headless Service if any, the names of the existing PVCs, the time, the feature gates,
whether the pod webhooks are active, whether deferred children are on; with the InPlaceRestart
gate the JobSet's pods; with gang scheduling whether the Workload API is served, the JobSet's
Workload and its PodGroups), calls ``reconcile``, and executes the returned ``Plan``: the child
writes in ``plan.WRITE_ORDER``, then the one status write, after which the status-gated events
are emitted.

Rules
-----

* Pure: no I/O, no clock (``now`` is an input), no randomness, no globals, no import of our
  packages other than ``jobset_controller.api``. The same snapshot always gives the same Plan.
* Level-triggered: everything is recomputed from the snapshot; nothing depends on which watch
  event caused the pass.
* A steady JobSet gives an empty Plan: the status is written only when it changed (compared
  semantically, ``replicatedJobsStatus`` order-insensitive), and no write is planned for what
  already is. That includes PVCs, as long as the snapshot lists the existing claims (the
  controller caches them); a snapshot that does not know them (``existing_pvcs=None``) gets every
  claim of a running JobSet sent each pass, as upstream does, and the executor ignores
  AlreadyExists.
* Every condition reason and message and every event reason lives in ``catalogue``, spelled as
  upstream spells it, except the few words of our additions below; label keys live in
  ``jobset_controller.api``.

Theory of operation
-------------------

The order of a pass is written once, in the docstring of ``steps`` (numbered, each step naming
the module that decides it); docs/behaviour.md#reconcile-order says what it means for a JobSet.
Each step takes the frozen view of the snapshot (``view``) and the status draft (``draft``) and
returns values; conditions are written by the table in ``conditions``.

Our additions, where upstream has a reconcile error or no behaviour
-------------------------------------------------------------------

* Defaults in memory: the snapshot's JobSet is defaulted as admission would (``default_jobset``)
  before anything reads it, so a JobSet that bypassed the mutating webhook runs as if it had
  been admitted (a Service when DNS hostnames default to on, Indexed Jobs...). Defaults are never
  written back to the spec.
* Invalid JobSets fail, until they have Jobs or a written status (``rejection``): when
  admission's CREATE rules (``validate_create``, without the feature-gate and existing-PVC
  checks) find errors, the JobSet creates nothing and gets ``Failed=True`` with reason
  ``ValidationFailed``, a message listing the errors (field path and reason, within the
  32768-byte limit), ``terminalState: Failed`` and a Warning event ``ValidationFailed`` with the
  same text after the status write.
* ``failurePolicy.restartStrategy: InPlaceRestart`` with the InPlaceRestart gate off fails the
  same way with reason ``InPlaceRestartNotSupported``; with the gate on it runs
  (``in_place_restart``), and where upstream's in-place pass returns an error (a bad attempt
  annotation, completions != parallelism) a Warning event is emitted at once instead.
* An unreadable child Job (a missing or non-integer ``restart-attempt`` label; with the RestartJob
  gate also ``replicatedjob-name``, ``job-index``, ``job-restart-attempt``, an index out of range;
  no name or uid) stops the pass: a Warning event ``InvalidChildJob`` naming the Job and the
  problem, emitted at once, and no write. Upstream returns an error and retries; here the fix
  (or deletion) of the Job triggers the next pass through the Job watch.
* A RestartJob / RestartJobAndIgnoreMaxRestarts action that fires while the RestartJob gate is
  off emits a Warning event ``FeatureGateDisabled`` at once and writes no status; only the previous
  attempt's Jobs are still deleted (upstream: error, retry).
* Jobs that are being deleted are neither deleted again nor patched.
* Creates and deletes are bounded per pass (1000 each); the rest follow in the next pass.
* Deferred children (the Configuration's ``deferredChildren.enable``, off by default) is ours
  alone; the Workload API's unavailability is an event (``WorkloadAPIUnavailable``), not a retry.

Exclusive placement by leader and followers, as upstream's pod webhooks do it, is handled: when
the pod webhooks are known to be active (``Snapshot.pod_webhooks``) a new Job is labelled for
them and gets no affinity (``placement``, ``desired_jobs``); the webhooks (webhook/pods.py) and
the pod controller (controller/pods.py, deciding with ``pod_placement``) place its pods. When they
are not known to be active, the Job carries the affinity terms in its template instead.
"""

from typing import TYPE_CHECKING, Any

from jobset_controller.reconcile.plan import (
    WRITE_ORDER,
    Event,
    JobDelete,
    JobPatch,
    Plan,
    Restart,
    SchedulingWrite,
    WritePhase,
)
from jobset_controller.reconcile.snapshot import Snapshot

if TYPE_CHECKING:
    # Imported on first use at run time (``__getattr__`` below): the module docstring says why.
    from jobset_controller.reconcile.steps import reconcile

# What the controller glue uses: the function, its input, its output and the output's parts.
# Everything else is imported from the module that defines it.
__all__ = [
    "WRITE_ORDER",
    "Event",
    "JobDelete",
    "JobPatch",
    "Plan",
    "Restart",
    "SchedulingWrite",
    "Snapshot",
    "WritePhase",
    "reconcile",
]


if not TYPE_CHECKING:  # type checkers see the imports above instead, so a typo stays an error

    def __getattr__(name: str) -> Any:
        """PEP 562: `reconcile` (and with it the API models) is imported on first use, so the
        controller's path from process start to /readyz, which needs the Plan's types, does not
        load it (the module docstring says why; jobset_controller/api/__init__.py likewise)."""
        if name != "reconcile":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from jobset_controller.reconcile.steps import reconcile

        globals()["reconcile"] = reconcile
        return reconcile
