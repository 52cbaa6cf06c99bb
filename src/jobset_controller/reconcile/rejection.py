"""JobSets this controller will not run: invalid ones, and the InPlaceRestart strategy.

Admission normally keeps invalid JobSets out, but a JobSet can reach the controller without it
(webhook not installed, ``failurePolicy: Ignore``, an older webhook). Running it would create Jobs
with invalid names or labels, so such a JobSet fails instead: ``Failed=True`` with reason
``ValidationFailed`` and a message listing every error (field path and reason), within the
condition message limit. It is checked with admission's own CREATE rules on the JobSet as defaulted
in memory, except the feature-gate checks, which were admission's business when the JobSet was
created: turning a gate off later must not fail running JobSets (a gated failure action that
fires with its gate off gets a Warning event ``FeatureGateDisabled`` and no status write instead,
see ``failure_policy.Blocked``). The existing-PVC checks need the cluster and are skipped.

``failurePolicy.restartStrategy: InPlaceRestart`` with the InPlaceRestart gate off (admission
refuses it then; it can only come from a JobSet that bypassed admission or was created while the
gate was on) fails with ``InPlaceRestartNotSupported``. With the gate on it runs
(``in_place_restart``).
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from jobset_controller.api import (
    FeatureGates,
    FieldError,
    JobSet,
    RestartStrategy,
    validate_create,
)
from jobset_controller.reconcile.catalogue import (
    IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE,
    IN_PLACE_RESTART_NOT_SUPPORTED_REASON,
    MAX_CONDITION_MESSAGE_BYTES,
    VALIDATION_FAILED_MESSAGE,
    VALIDATION_FAILED_REASON,
)


@dataclass(frozen=True)
class Rejection:
    """Why the JobSet fails without running: the Failed condition's reason and message."""

    reason: str
    message: str


def find_rejection(js: JobSet, features: FeatureGates, *, realised: bool) -> Rejection | None:
    """The reason not to run the (defaulted) ``js``, or None when it may run.

    The create-time checks stand in for a validating webhook the JobSet may have bypassed, so
    they run only until the JobSet is realised (has Jobs or a written status). After that, like
    upstream's update webhook, they are not repeated: a legal update (an elastic scale-up, a new
    coordinator) must never fail a running JobSet.
    """
    policy = js.spec.failure_policy
    in_place = policy is not None and policy.restart_strategy == RestartStrategy.IN_PLACE_RESTART
    if in_place and not features.in_place_restart:
        return Rejection(
            IN_PLACE_RESTART_NOT_SUPPORTED_REASON, IN_PLACE_RESTART_NOT_SUPPORTED_MESSAGE
        )
    if realised:
        return None
    admission_gates = dataclasses.replace(
        features, restart_job=True, in_place_restart=True, workload_aware_scheduling=True
    )
    errors = validate_create(js, features=admission_gates)
    if not errors:
        return None
    return Rejection(VALIDATION_FAILED_REASON, validation_message(errors))


def validation_message(
    errors: Sequence[FieldError], limit: int = MAX_CONDITION_MESSAGE_BYTES
) -> str:
    """``jobset is invalid: <error>; <error>...``, cut to at most ``limit`` UTF-8 bytes.

    Errors that do not fit are counted instead (``... and 3 more errors``).
    """
    message = f"{VALIDATION_FAILED_MESSAGE}: "
    for position, error in enumerate(errors):
        separator = "" if position == 0 else "; "
        rest = len(errors) - position
        candidate = f"{message}{separator}{error}"
        tail = f"; ... and {rest - 1} more errors" if rest > 1 else ""
        if _size(candidate + tail) > limit:
            return _cut(f"{message}{separator}... and {rest} more errors", limit)
        message = candidate
    return message


def _size(text: str) -> int:
    return len(text.encode())


def _cut(text: str, limit: int) -> str:
    return text.encode()[:limit].decode(errors="ignore")
