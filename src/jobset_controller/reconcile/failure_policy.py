"""What a failed child Job does to its JobSet (docs/behaviour.md#failure-policy).

Runs when at least one Job of the current attempt has failed, before the success policy looks at
anything. Without a failure policy the JobSet fails (``FailedJobs``). With one, the first rule (in
order) that matches ANY failed Job decides; among the Jobs it matches, the one that failed first
(earliest ``Failed`` condition ``lastTransitionTime``, ties to the first listed) is "the first
failed job" the messages name. A rule matches a Job when each of its lists is empty or holds:
the Job's failure reason is in ``onJobFailureReasons``; one of ``onJobFailureMessagePatterns``
finds a match anywhere in the failure message (Go's ``regexp.MatchString``: RE2 syntax, time
linear in the message, see ``api.message_patterns``; a pattern that does not compile is skipped,
as upstream skips it); its ``replicatedjob-name`` label is in ``targetReplicatedJobs`` (a Job
without that label never matches). When no rule matches, the default action applies to the Job
that failed first.

Actions map to appliers in ``ACTION_APPLIERS``. Nothing is deleted in the pass that decides a
restart: raising ``status.restarts`` (or a ``jobRestarts`` entry) turns the Jobs of the old attempt
into previous Jobs, which the next pass deletes and then recreates.

Every message that names the first failed job goes on with what failed it (``first_failure``:
the Job's reason, its first failed pod, node, container and exit code), and a restart is recorded
on the draft (``plan.Restart``) for the controller's restart metrics and timeline.
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from jobset_controller.api import (
    JOB_INDEX_KEY,
    REPLICATED_JOB_NAME_KEY,
    ConditionType,
    FailurePolicy,
    FailurePolicyAction,
    FailurePolicyRule,
)
from jobset_controller.api.constants import MAX_JOB_RESTART_REPLICAS
from jobset_controller.api.message_patterns import pattern_finds_match
from jobset_controller.reconcile.catalogue import (
    DEFAULT_FAILURE_POLICY_REASON,
    FAIL_JOBSET_ACTION_MESSAGE,
    FAIL_JOBSET_ACTION_REASON,
    FAILED_JOBS_MESSAGE,
    FAILED_JOBS_REASON,
    FAILURE_POLICY_REASON_PREFIX,
    FEATURE_GATE_DISABLED_EVENT,
    INVALID_CHILD_JOB_EVENT,
    REACHED_MAX_RESTARTS_MESSAGE,
    REACHED_MAX_RESTARTS_REASON,
    RESTART_JOB_ACTION_EVENT,
    RESTART_JOB_ACTION_MESSAGE,
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT,
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE,
    RESTART_JOB_TOO_MANY_REPLICAS_EVENT,
    RESTART_JOBSET_ACTION_EVENT,
    RESTART_JOBSET_ACTION_MESSAGE,
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT,
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE,
    WARNING,
    with_first_failed_job,
)
from jobset_controller.reconcile.classify import JOB_FAILED, JOB_FAILURE_TARGET, parse_decimal
from jobset_controller.reconcile.conditions import NewCondition
from jobset_controller.reconcile.draft import StatusDraft
from jobset_controller.reconcile.first_failure import FirstFailure, first_failure, with_detail
from jobset_controller.reconcile.jobs import Job, labels_of, name_of, true_condition, uid_of
from jobset_controller.reconcile.plan import Event, Restart
from jobset_controller.reconcile.terminal import fail_jobset
from jobset_controller.reconcile.timestamps import parse_time

# Spec 3.4 (KEP-262): when no rule matches a failed Job, the whole JobSet is restarted.
DEFAULT_FAILURE_POLICY_ACTION: Final = FailurePolicyAction.RESTART_JOBSET

# A Failed condition without a readable time sorts first, as Go's zero time does.
_ZERO_TIME: Final = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RuleMatch:
    """The decision: which action, because of which rule (None: the default), for which Job."""

    action: FailurePolicyAction
    rule_name: str | None
    job: Job


@dataclass(frozen=True)
class Blocked:
    """The action cannot be carried out: the pass emits this Warning event at once, writes no
    status and creates nothing (the previous attempt's Jobs are still deleted, ``steps``).

    Upstream returns a reconcile error here and retries with backoff; here the pass ends
    normally, since retrying cannot help: the next pass comes with the fix (a Job relabelled or
    deleted arrives through the Job watch; a gate is turned on by restarting the controller,
    whose start reconciles every JobSet).
    """

    reason: str
    note: str

    def event(self) -> Event:
        """The immediate Warning event."""
        return Event(WARNING, self.reason, self.note, after_status=False)


@dataclass(frozen=True)
class _Context:
    policy: FailurePolicy
    match: RuleMatch
    replicas: Mapping[str, int]
    restart_job_gate: bool
    failure: FirstFailure


def failure_condition(job: Job) -> Mapping[str, Any] | None:
    """The Job's ``Failed=True`` condition, else its ``FailureTarget=True`` one, else None.

    A Job is in the failed bucket through its FailureTarget condition only with
    earlyJobConditions (``classify``); the Job controller gives Failed the same reason and
    message, so rules match the same way whichever of the two a pass reads."""
    return true_condition(job, JOB_FAILED) or true_condition(job, JOB_FAILURE_TARGET)


def failure_time(job: Job) -> datetime:
    """When the Job failed: the ``lastTransitionTime`` of its ``failure_condition``."""
    condition = failure_condition(job)
    moment = parse_time(condition.get("lastTransitionTime") if condition else None)
    return _ZERO_TIME if moment is None else moment


def failure_of(job: Job, failed_pods: Sequence[Mapping[str, Any]]) -> FirstFailure:
    """What failed ``job``: its failure condition's reason and its first failed pod."""
    condition = failure_condition(job) or {}
    return first_failure(uid_of(job), str(condition.get("reason") or ""), failed_pods)


def first_failed_job(jobs: Sequence[Job]) -> Job:
    """The Job that failed first; ties go to the first listed. ``jobs`` must not be empty."""
    return min(jobs, key=failure_time)


def rule_applies(rule: FailurePolicyRule, job: Job) -> bool:
    """Reasons, message patterns and target replicatedJobs of ``rule`` all admit ``job``."""
    condition = failure_condition(job)
    if condition is None:
        return False
    reasons = rule.on_job_failure_reasons
    if reasons and condition.get("reason") not in reasons:
        return False
    patterns = rule.on_job_failure_message_patterns
    message = str(condition.get("message") or "")
    if patterns and not any(pattern_finds_match(pattern, message) for pattern in patterns):
        return False
    rjob_name = labels_of(job).get(REPLICATED_JOB_NAME_KEY)
    if rjob_name is None:
        return False
    targets = rule.target_replicated_jobs
    return not targets or rjob_name in targets


def find_first_matching_rule(
    rules: Sequence[FailurePolicyRule], failed: Sequence[Job]
) -> RuleMatch | None:
    """The first rule that matches any failed Job, with the earliest failed Job it matches."""
    for rule in rules:
        matching = [job for job in failed if rule_applies(rule, job)]
        if matching:
            return RuleMatch(rule.action, rule.name, first_failed_job(matching))
    return None


def execute_failure_policy(
    policy: FailurePolicy | None,
    failed: Sequence[Job],
    draft: StatusDraft,
    *,
    replicas: Mapping[str, int],
    restart_job_gate: bool,
    failed_pods: Sequence[Mapping[str, Any]] = (),
) -> StatusDraft | Blocked:
    """The draft after the failure policy has handled the ``failed`` Jobs (not empty).

    Args:
        policy: ``spec.failurePolicy`` of the defaulted JobSet (rule names filled in).
        failed: The current attempt's failed Jobs.
        draft: The status so far.
        replicas: Replicas of each replicatedJob, by name.
        restart_job_gate: The RestartJob feature gate.
        failed_pods: The JobSet's failed pods as the pod cache holds them (``Snapshot``).
    """
    if policy is None:
        job = first_failed_job(failed)
        message = with_first_failed_job(FAILED_JOBS_MESSAGE, name_of(job))
        return fail_jobset(
            draft, FAILED_JOBS_REASON, with_detail(message, failure_of(job, failed_pods))
        )
    match = find_first_matching_rule(policy.rules, failed)
    if match is None:
        match = RuleMatch(DEFAULT_FAILURE_POLICY_ACTION, None, first_failed_job(failed))
    failure = failure_of(match.job, failed_pods)
    context = _Context(policy, match, replicas, restart_job_gate, failure)
    return ACTION_APPLIERS[match.action](context, draft)


def restarts_towards_max(draft: StatusDraft, *, restart_job_gate: bool) -> int:
    """Restarts counted against maxRestarts: global ones, plus per-Job ones with the gate."""
    total = draft.restarts_count_towards_max
    if restart_job_gate:
        total += sum(counts.total() for counts in draft.job_restarts_count_towards_max.values())
    return total


def restarting_reason(rule_name: str | None) -> str:
    """Reason of RestartingJobSet=True: ``FailurePolicy_<rule>``, or the default's."""
    if rule_name is None:
        return DEFAULT_FAILURE_POLICY_REASON
    return f"{FAILURE_POLICY_REASON_PREFIX}{rule_name}"


def _message(context: _Context, base: str) -> str:
    return with_detail(with_first_failed_job(base, name_of(context.match.job)), context.failure)


def _restart(context: _Context, draft: StatusDraft, *, whole_jobset: bool) -> Restart:
    condition = failure_condition(context.match.job) or {}
    return Restart(
        action=context.match.action.value,
        reason=context.failure.reason,
        job=name_of(context.match.job),
        failed_at=str(condition.get("lastTransitionTime") or ""),
        whole_jobset=whole_jobset,
        attempt=draft.restarts,
    )


def _reached_max_restarts(context: _Context, draft: StatusDraft) -> bool:
    counted = restarts_towards_max(draft, restart_job_gate=context.restart_job_gate)
    return counted >= context.policy.max_restarts


def _fail_for_max_restarts(context: _Context, draft: StatusDraft) -> StatusDraft:
    message = _message(context, REACHED_MAX_RESTARTS_MESSAGE)
    return fail_jobset(draft, REACHED_MAX_RESTARTS_REASON, message)


def _fail_jobset(context: _Context, draft: StatusDraft) -> StatusDraft | Blocked:
    message = _message(context, FAIL_JOBSET_ACTION_MESSAGE)
    return fail_jobset(draft, FAIL_JOBSET_ACTION_REASON, message)


def _restart_jobset(
    context: _Context, draft: StatusDraft, *, counts_towards_max: bool
) -> StatusDraft:
    if counts_towards_max:
        base, event_reason = RESTART_JOBSET_ACTION_MESSAGE, RESTART_JOBSET_ACTION_EVENT
    else:
        base = RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE
        event_reason = RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT
    message = _message(context, base)
    draft = draft.restarted(counts_towards_max=counts_towards_max)
    draft = dataclasses.replace(draft, restart=_restart(context, draft, whole_jobset=True))
    draft = draft.with_condition(
        NewCondition(
            ConditionType.RESTARTING_JOBSET,
            True,
            restarting_reason(context.match.rule_name),
            message,
        )
    )
    return draft.with_event(Event(WARNING, event_reason, message, after_status=True))


def _restart_jobset_counted(context: _Context, draft: StatusDraft) -> StatusDraft | Blocked:
    if _reached_max_restarts(context, draft):
        return _fail_for_max_restarts(context, draft)
    return _restart_jobset(context, draft, counts_towards_max=True)


def _restart_jobset_ignoring_max(context: _Context, draft: StatusDraft) -> StatusDraft | Blocked:
    return _restart_jobset(context, draft, counts_towards_max=False)


def _job_position(context: _Context) -> tuple[str, int] | Blocked:
    """(replicatedJob, job index) of the matched Job, for a per-Job restart."""
    job = context.match.job
    if not context.restart_job_gate:
        return Blocked(
            FEATURE_GATE_DISABLED_EVENT,
            f"failure policy action {context.match.action.value} needs the RestartJob feature "
            f"gate, which is disabled (first failed job: {name_of(job)})",
        )
    labels = labels_of(job)
    rjob_name = labels.get(REPLICATED_JOB_NAME_KEY, "")
    job_index = parse_decimal(labels.get(JOB_INDEX_KEY))
    replicas = context.replicas.get(rjob_name)
    if replicas is None or job_index is None or not 0 <= job_index < replicas:
        return Blocked(
            INVALID_CHILD_JOB_EVENT,
            f'child job "{name_of(job)}" cannot be restarted: its labels '
            f"{REPLICATED_JOB_NAME_KEY} and {JOB_INDEX_KEY} do not name a Job of the spec",
        )
    if replicas > MAX_JOB_RESTART_REPLICAS:
        # Admission refuses this (RestartJob rules need replicas <= the bound) but a rule added by
        # a later update is not checked again. The per-index arrays could not be written (the API
        # caps them at the bound), and building one would cost time per replica; do neither.
        return Blocked(
            RESTART_JOB_TOO_MANY_REPLICAS_EVENT,
            f"failure policy action {context.match.action.value} cannot restart "
            f'"{name_of(job)}": replicated job {rjob_name} has {replicas} replicas, more than '
            f"the {MAX_JOB_RESTART_REPLICAS} a per-job restart can track",
        )
    return rjob_name, job_index


def _restart_job(
    context: _Context, draft: StatusDraft, *, counts_towards_max: bool
) -> StatusDraft | Blocked:
    position = _job_position(context)
    if isinstance(position, Blocked):
        return position
    rjob_name, job_index = position
    if counts_towards_max and _reached_max_restarts(context, draft):
        return _fail_for_max_restarts(context, draft)
    replicas = context.replicas[rjob_name]
    job_restarts = dict(draft.job_restarts)
    job_restarts[rjob_name] = draft.job_restarts_of(rjob_name).incremented(job_index, replicas)
    towards_max = dict(draft.job_restarts_count_towards_max)
    if counts_towards_max:
        current = draft.job_restarts_count_towards_max_of(rjob_name)
        towards_max[rjob_name] = current.incremented(job_index, replicas)
        base, event_reason = RESTART_JOB_ACTION_MESSAGE, RESTART_JOB_ACTION_EVENT
    else:
        base = RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_MESSAGE
        event_reason = RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT
    draft = dataclasses.replace(
        draft, job_restarts=job_restarts, job_restarts_count_towards_max=towards_max
    )
    draft = dataclasses.replace(draft, restart=_restart(context, draft, whole_jobset=False))
    message = _message(context, base)
    return draft.with_event(Event(WARNING, event_reason, message, after_status=True))


def _restart_job_counted(context: _Context, draft: StatusDraft) -> StatusDraft | Blocked:
    return _restart_job(context, draft, counts_towards_max=True)


def _restart_job_ignoring_max(context: _Context, draft: StatusDraft) -> StatusDraft | Blocked:
    return _restart_job(context, draft, counts_towards_max=False)


# Failure policy action -> what it does to the status (docs/behaviour.md#failure-actions).
ACTION_APPLIERS: Final[
    Mapping[FailurePolicyAction, Callable[[_Context, StatusDraft], StatusDraft | Blocked]]
] = MappingProxyType(
    {
        FailurePolicyAction.FAIL_JOBSET: _fail_jobset,
        FailurePolicyAction.RESTART_JOBSET: _restart_jobset_counted,
        FailurePolicyAction.RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS: _restart_jobset_ignoring_max,
        FailurePolicyAction.RESTART_JOB: _restart_job_counted,
        FailurePolicyAction.RESTART_JOB_AND_IGNORE_MAX_RESTARTS: _restart_job_ignoring_max,
    }
)
