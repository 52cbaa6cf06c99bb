"""In-place restart (gate InPlaceRestart, ``failurePolicy.restartStrategy: InPlaceRestart``).

See docs/behaviour.md#in-place-restart. The controller's part of KEP-467 is a barrier: an agent
in every pod annotates its pod with the in-place restart attempt it is in
(``jobset.sigs.k8s.io/in-place-restart-attempt``); this pass reads those attempts from the
JobSet's pods (``Snapshot.pods``) and moves two status fields the agents watch:

1. any container of any pod restarted more than ``maxRestarts`` times -> Failed
   ``ReachedMaxRestarts`` (message without the "first failed job" suffix); this catches a
   worker failing so fast that no barrier is ever lifted;
2. the attempts of the pods that are not ``Failed`` (a pod without the annotation is skipped:
   its agent has not started yet);
3. the highest attempt, less the restarts that do not count towards the maximum
   (``restarts - restartsCountTowardsMax``), above ``maxRestarts`` -> Failed ``ReachedMaxRestarts``;
4. every pod (``sum of replicas * parallelism``) annotated with one same attempt ->
   ``currentInPlaceRestartAttempt`` is that attempt: the agents lift the barrier;
5. otherwise, once some pod is past attempt 0 -> ``previousInPlaceRestartAttempt`` is the highest
   attempt less one, never lowered: agents at or below it exit and the kubelet restarts their
   pod's containers in place.

Both fields are written only when they change, so a steady JobSet writes nothing. Failed Jobs are
handled before this pass, exactly as with ``Recreate``.

Where upstream returns a reconcile error (and retries with backoff), this pass emits one Warning
event at once, changes no in-place field and asks for no retry: the change that fixes it (the
pod's annotation, the JobSet's spec) wakes the JobSet again through its watch. The rest of the
pass (counts, Jobs, Service) goes ahead.

* an annotation that is not a non-negative integer (decimal, optional sign, at most MaxInt32):
  event ``InvalidInPlaceRestartAttempt`` naming the pod;
* a replicatedJob whose ``completions`` and ``parallelism`` are not both set and equal
  (admission refuses it; it can only come from a JobSet that bypassed admission or was changed
  since): event ``InPlaceRestartMisconfigured``.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from jobset_controller.api import IN_PLACE_RESTART_ATTEMPT_KEY, JobSet, RestartStrategy
from jobset_controller.reconcile.catalogue import (
    IN_PLACE_RESTART_MISCONFIGURED_EVENT,
    INVALID_IN_PLACE_RESTART_ATTEMPT_EVENT,
    REACHED_MAX_RESTARTS_MESSAGE,
    REACHED_MAX_RESTARTS_REASON,
    WARNING,
    in_place_misconfigured_message,
    invalid_in_place_attempt_message,
)
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.plan import Event
from jobset_controller.reconcile.terminal import fail_jobset

MAX_INT32: Final = 2**31 - 1
PREVIOUS: Final = "previousInPlaceRestartAttempt"
CURRENT: Final = "currentInPlaceRestartAttempt"
# strconv.Atoi's syntax: decimal digits with an optional sign.
_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class InPlaceOutcome:
    """The draft (Failed or as it was), the in-place status fields to set, a Warning event."""

    draft: StatusDraft
    status_fields: Mapping[str, int] = field(default_factory=dict)
    event: Event | None = None


def uses_in_place_restart(js: JobSet) -> bool:
    """The JobSet asks for the InPlaceRestart strategy."""
    policy = js.spec.failure_policy
    return policy is not None and policy.restart_strategy == RestartStrategy.IN_PLACE_RESTART


def max_container_restarts(pods: Sequence[Mapping[str, Any]]) -> int:
    """The highest ``restartCount`` of any init or regular container of ``pods``."""
    highest = 0
    for pod in pods:
        status = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(key) or ():
                count = container.get("restartCount")
                if isinstance(count, int) and count > highest:
                    highest = count
    return highest


def parse_attempt(raw: object) -> int | None:
    """The attempt an annotation value states, or None if it is not a non-negative int32."""
    if not isinstance(raw, str) or not _DECIMAL.fullmatch(raw):
        return None
    value = int(raw)
    return value if 0 <= value <= MAX_INT32 else None


def pod_attempts(pods: Sequence[Mapping[str, Any]]) -> list[int] | Event:
    """The attempts of the pods not Failed that carry one, or the event for the first bad one."""
    attempts: list[int] = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") == "Failed":
            continue  # its replacement may already exist
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if IN_PLACE_RESTART_ATTEMPT_KEY not in annotations:
            continue  # its agent has not written it yet
        attempt = parse_attempt(annotations[IN_PLACE_RESTART_ATTEMPT_KEY])
        if attempt is None:
            note = invalid_in_place_attempt_message(str(metadata.get("name") or ""))
            return Event(WARNING, INVALID_IN_PLACE_RESTART_ATTEMPT_EVENT, note, False)
        attempts.append(attempt)
    return attempts


def expected_pods(js: JobSet) -> int | Event:
    """``sum of replicas * parallelism``, or the event naming a replicatedJob whose completions and
    parallelism are not both set and equal."""
    total = 0
    for rjob in js.spec.replicated_jobs:
        spec = rjob.template.spec
        if spec.completions is None or spec.parallelism is None:
            return _misconfigured(rjob.name)
        if spec.completions != spec.parallelism:
            return _misconfigured(rjob.name)
        total += rjob.replicas * spec.parallelism
    return total


def _misconfigured(rjob_name: str) -> Event:
    note = in_place_misconfigured_message(rjob_name)
    return Event(WARNING, IN_PLACE_RESTART_MISCONFIGURED_EVENT, note, False)


def reconcile_in_place_restart(
    js: JobSet, pods: Sequence[Mapping[str, Any]], draft: StatusDraft
) -> InPlaceOutcome:
    """The in-place part of a pass of the (defaulted) ``js`` (module docstring)."""
    policy = js.spec.failure_policy
    max_restarts = policy.max_restarts if policy is not None else 0
    if max_container_restarts(pods) > max_restarts:
        return InPlaceOutcome(_reached_max(draft))
    attempts = pod_attempts(pods)
    if isinstance(attempts, Event):
        return InPlaceOutcome(draft, event=attempts)
    highest = max(attempts, default=0)
    uncounted = js.status.restarts - js.status.restarts_count_towards_max
    if highest - uncounted > max_restarts:
        return InPlaceOutcome(_reached_max(draft))
    expected = expected_pods(js)
    if isinstance(expected, Event):
        return InPlaceOutcome(draft, event=expected)
    if attempts and len(attempts) == expected and len(set(attempts)) == 1:
        if js.status.current_in_place_restart_attempt == attempts[0]:
            return InPlaceOutcome(draft)
        return InPlaceOutcome(draft, {CURRENT: attempts[0]})
    if highest == 0:
        return InPlaceOutcome(draft)  # a new JobSet: no pod past its first attempt
    previous = js.status.previous_in_place_restart_attempt
    if previous is not None and highest - 1 <= previous:
        # Never lowered: the pod with the highest attempt may be being recreated.
        return InPlaceOutcome(draft)
    return InPlaceOutcome(draft, {PREVIOUS: highest - 1})


def _reached_max(draft: StatusDraft) -> StatusDraft:
    return fail_jobset(draft, REACHED_MAX_RESTARTS_REASON, REACHED_MAX_RESTARTS_MESSAGE)
