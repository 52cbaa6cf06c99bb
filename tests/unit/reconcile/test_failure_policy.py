"""The failure policy: rule matching, actions, max restarts, restart strategies.

See docs/behaviour.md#failure-policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import REPLICATED_JOB_NAME_KEY, FailurePolicyRule, FeatureGates
from jobset_controller.api.message_patterns import pattern_finds_match
from jobset_controller.reconcile import Plan
from jobset_controller.reconcile.catalogue import (
    FEATURE_GATE_DISABLED_EVENT,
    RESTART_JOB_ACTION_EVENT,
    RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT,
    RESTART_JOBSET_ACTION_EVENT,
    RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT,
)
from jobset_controller.reconcile.failure_policy import (
    ACTION_APPLIERS,
    DEFAULT_FAILURE_POLICY_ACTION,
    find_first_matching_rule,
    first_failed_job,
    rule_applies,
)

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

T1 = "2025-06-01T11:00:00Z"
T2 = "2025-06-01T11:30:00Z"
T3 = "2025-06-01T11:45:00Z"
GATE = FeatureGates(restart_job=True)


def two_workers(kit: Kit) -> JobSetBuilder:
    return kit.jobset().replicated_job("leader").replicated_job("workers", replicas=2)


def conditions(plan: Plan) -> dict[str, Mapping[str, Any]]:
    assert plan.status is not None
    return {c["type"]: c for c in plan.status.get("conditions", [])}


def rule(action: str, name: str = "", **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"action": action, **fields}
    if name:
        out["name"] = name
    return out


# --- no failure policy --------------------------------------------------------------------------


def test_without_failure_policy_a_failed_job_fails_the_jobset(kit: Kit) -> None:
    plan = kit.reconcile(
        two_workers(kit),
        kit.job("leader", 0, state="ready"),
        kit.job("workers", 0, state="failed", finished_at=T2),
        kit.job("workers", 1, state="failed", finished_at=T1),
    )
    failed = conditions(plan)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "FailedJobs")
    assert failed["message"] == (
        "jobset failed due to one or more job failures (first failed job: trainer-workers-1)"
    )
    assert plan.status is not None
    assert plan.status["terminalState"] == "Failed"
    assert plan.failed
    assert not plan.completed
    assert [(e.type, e.reason, e.after_status) for e in plan.events] == [
        ("Warning", "FailedJobs", True)
    ]
    assert plan.jobs_to_create == ()
    assert plan.jobs_to_delete == ()


def test_failure_time_ties_go_to_the_first_listed_job(kit: Kit) -> None:
    jobs = [
        kit.job("workers", 1, state="failed", finished_at=T1),
        kit.job("workers", 0, state="failed", finished_at=T1),
    ]
    assert first_failed_job(jobs)["metadata"]["name"] == "trainer-workers-1"


def test_failed_outcome_ends_a_recorded_restart(kit: Kit) -> None:
    builder = two_workers(kit).condition("RestartingJobSet", "True", "DefaultFailurePolicy", "x")
    plan = kit.reconcile(builder, kit.job("workers", 0, state="failed"))
    restarting = conditions(plan)["RestartingJobSet"]
    assert (restarting["status"], restarting["reason"], restarting["message"]) == (
        "False",
        "JobSetFailed",
        "jobset failed",
    )
    assert restarting["lastTransitionTime"] == kit.now_text
    assert [(e.type, e.reason) for e in plan.events] == [
        ("Warning", "FailedJobs"),
        ("Normal", "JobSetFailed"),
    ]


# --- rule matching ------------------------------------------------------------------------------


def failed_job(kit: Kit, **fields: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "state": "failed",
        "reason": "PodFailurePolicy",
        "message": "Container main for pod ns/p-0 failed with exit code 42 matching FailJob rule",
    }
    return kit.job("workers", 0, **{**defaults, **fields})


# (id, rule fields, job fields, applies)
MATCH_CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("empty rule matches any failed job", {}, {}, True),
    ("reason listed", {"onJobFailureReasons": ["PodFailurePolicy"]}, {}, True),
    (
        "reason not listed",
        {"onJobFailureReasons": ["BackoffLimitExceeded", "DeadlineExceeded"]},
        {},
        False,
    ),
    ("pattern found anywhere", {"onJobFailureMessagePatterns": ["exit code 4[0-9]"]}, {}, True),
    ("anchored pattern not at start", {"onJobFailureMessagePatterns": ["^exit code"]}, {}, False),
    (
        "one of several patterns is enough",
        {"onJobFailureMessagePatterns": ["OOMKilled", "matching FailJob"]},
        {},
        True,
    ),
    ("invalid pattern never matches", {"onJobFailureMessagePatterns": ["exit (code"]}, {}, False),
    (
        "invalid pattern is skipped and a valid one still matches",
        {"onJobFailureMessagePatterns": ["exit (code", "exit code"]},
        {},
        True,
    ),
    ("target listed", {"targetReplicatedJobs": ["workers"]}, {}, True),
    ("target not listed", {"targetReplicatedJobs": ["leader"]}, {}, False),
    (
        "job without replicatedjob label never matches",
        {},
        {"labels": {REPLICATED_JOB_NAME_KEY: None}},
        False,
    ),
    (
        "all criteria must hold",
        {
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": ["exit code 42"],
            "targetReplicatedJobs": ["leader"],
        },
        {},
        False,
    ),
]


@pytest.mark.parametrize(
    ("rule_fields", "job_fields", "applies"),
    [case[1:] for case in MATCH_CASES],
    ids=[case[0] for case in MATCH_CASES],
)
def test_rule_applies(
    kit: Kit, rule_fields: dict[str, Any], job_fields: dict[str, Any], applies: bool
) -> None:
    policy_rule = FailurePolicyRule.model_validate(rule("FailJobSet", "r", **rule_fields))
    assert rule_applies(policy_rule, failed_job(kit, **job_fields)) is applies


def test_pattern_uses_search_semantics() -> None:
    assert pattern_finds_match("code", "exit code 1")
    assert not pattern_finds_match("^code", "exit code 1")
    assert not pattern_finds_match("[", "anything")


# Exponential for a backtracking engine on the Job controller's ordinary message (minutes with
# Python's re); RE2 answers in time linear in the message, so these tests finish at once.
CATASTROPHIC = r"^(\w+\s?)*\d$"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"


def test_catastrophic_pattern_is_answered_without_backtracking() -> None:
    assert not pattern_finds_match(CATASTROPHIC, BACKOFF_MESSAGE)
    assert not pattern_finds_match(CATASTROPHIC, BACKOFF_MESSAGE * 20)
    assert pattern_finds_match(CATASTROPHIC, BACKOFF_MESSAGE + " 7")


def test_catastrophic_pattern_in_a_rule_falls_through_to_the_next_rule(kit: Kit) -> None:
    builder = two_workers(kit).failure_policy(
        rule("FailJobSet", "frozen", onJobFailureMessagePatterns=[CATASTROPHIC]),
        rule(
            "RestartJobSetAndIgnoreMaxRestarts", "backoff", onJobFailureMessagePatterns=["limit$"]
        ),
    )
    plan = kit.reconcile(builder, kit.job("workers", 0, state="failed", message=BACKOFF_MESSAGE))
    assert conditions(plan)["RestartingJobSet"]["reason"] == "FailurePolicy_backoff"


@pytest.mark.parametrize(
    ("pattern", "message", "found"),
    [
        # Go's $ (no m flag) is the end of the text only; Python's also matches before a final \n.
        pytest.param("limit$", "backoff limit\n", False, id="dollar is end of text"),
        # Go's \w, \d and \s are ASCII; Python's str classes are Unicode.
        pytest.param(r"^\w+$", "é", False, id="word class is ASCII"),
        pytest.param(r"\d", "\u0663", False, id="digit class is ASCII"),
        pytest.param(r"\pL+$", "é", True, id="unicode letter class"),
        pytest.param(r"(?i)BACKOFF", BACKOFF_MESSAGE, True, id="case-insensitive flag"),
        pytest.param(r"(?P<n>backoff) limit\z", BACKOFF_MESSAGE, True, id="named group, \\z"),
        pytest.param("(?=Job)", BACKOFF_MESSAGE, False, id="lookahead does not compile"),
        pytest.param(
            r"(J)ob has reached the specified backoff limit\1",
            BACKOFF_MESSAGE,
            False,
            id="backreference does not compile",
        ),
        pytest.param("backoff", "lone surrogate \ud800 backoff", True, id="lone surrogate"),
    ],
)
def test_patterns_match_as_go_regexp_does(pattern: str, message: str, found: bool) -> None:
    assert pattern_finds_match(pattern, message) is found


def test_first_matching_rule_wins_even_if_a_later_rule_matches_an_earlier_failure(
    kit: Kit,
) -> None:
    rules = [
        FailurePolicyRule.model_validate(rule("FailJobSet", "first", targetReplicatedJobs=["w"])),
        FailurePolicyRule.model_validate(rule("RestartJobSet", "second")),
    ]
    early_other = kit.job("leader", 0, state="failed", finished_at=T1)
    late_target = kit.job("w", 0, state="failed", finished_at=T3)
    match = find_first_matching_rule(rules, [early_other, late_target])
    assert match is not None
    assert match.rule_name == "first"
    assert match.job["metadata"]["name"] == "trainer-w-0"


def test_matching_job_is_the_earliest_failure_among_the_rules_matches(kit: Kit) -> None:
    rules = [FailurePolicyRule.model_validate(rule("FailJobSet", "r", targetReplicatedJobs=["w"]))]
    jobs = [
        kit.job("leader", 0, state="failed", finished_at=T1),
        kit.job("w", 0, state="failed", finished_at=T3),
        kit.job("w", 1, state="failed", finished_at=T2),
    ]
    match = find_first_matching_rule(rules, jobs)
    assert match is not None
    assert match.job["metadata"]["name"] == "trainer-w-1"


def test_every_action_has_an_applier_and_the_default_restarts_the_jobset() -> None:
    from jobset_controller.api import FailurePolicyAction

    assert set(ACTION_APPLIERS) == set(FailurePolicyAction)
    assert DEFAULT_FAILURE_POLICY_ACTION == FailurePolicyAction.RESTART_JOBSET


# --- actions through reconcile ------------------------------------------------------------------


def test_fail_jobset_action(kit: Kit) -> None:
    builder = two_workers(kit).failure_policy(rule("FailJobSet", "fatal"), max_restarts=5)
    plan = kit.reconcile(builder, kit.job("workers", 1, state="failed"))
    failed = conditions(plan)["Failed"]
    assert failed["reason"] == "FailJobSetFailurePolicyAction"
    assert failed["message"] == (
        "applying FailJobSet failure policy action (first failed job: trainer-workers-1)"
    )
    assert plan.failed


@pytest.mark.parametrize(
    ("rules", "expected_reason"),
    [
        ([rule("RestartJobSet", "retry")], "FailurePolicy_retry"),
        ([rule("RestartJobSet")], "FailurePolicy_failurePolicyRule0"),
        ([], "DefaultFailurePolicy"),
        ([rule("FailJobSet", "never", targetReplicatedJobs=["leader"])], "DefaultFailurePolicy"),
    ],
    ids=[
        "named rule",
        "unnamed rule gets the admission default name",
        "no rules: the default action",
        "no rule matches: the default action",
    ],
)
def test_restart_jobset_action(kit: Kit, rules: list[dict[str, Any]], expected_reason: str) -> None:
    builder = two_workers(kit).failure_policy(*rules, max_restarts=3)
    builder.status(restarts=1, restartsCountTowardsMax=1)
    plan = kit.reconcile(
        builder,
        kit.job("leader", 0, state="ready", restart_attempt=1),
        kit.job("workers", 0, state="failed", restart_attempt=1),
    )
    assert plan.status is not None
    assert (plan.status["restarts"], plan.status["restartsCountTowardsMax"]) == (2, 2)
    restarting = conditions(plan)["RestartingJobSet"]
    message = "applying RestartJobSet failure policy action (first failed job: trainer-workers-0)"
    assert (restarting["status"], restarting["reason"], restarting["message"]) == (
        "True",
        expected_reason,
        message,
    )
    assert [(e.type, e.reason, e.note, e.after_status) for e in plan.events] == [
        ("Warning", expected_reason, message, True),
        ("Warning", RESTART_JOBSET_ACTION_EVENT, message, True),
    ]
    assert plan.jobs_to_delete == (), "nothing moves this pass"
    assert plan.jobs_to_create == ()
    assert not plan.failed


@pytest.mark.parametrize(
    ("max_restarts", "counted", "job_counted", "gate", "fails"),
    [
        (3, 2, [], False, False),
        (3, 3, [], False, True),
        (0, 0, [], False, True),
        (3, 1, [1, 1], True, True),
        (3, 1, [1, 1], False, False),
    ],
    ids=[
        "below max restarts",
        "at max restarts",
        "max restarts zero fails at once",
        "with the gate per-job restarts count towards max",
        "without the gate per-job restarts are ignored",
    ],
)
def test_restart_jobset_respects_max_restarts(
    kit: Kit, max_restarts: int, counted: int, job_counted: list[int], gate: bool, fails: bool
) -> None:
    builder = two_workers(kit).failure_policy(max_restarts=max_restarts)
    entry: dict[str, Any] = {
        "name": "workers",
        "ready": 0,
        "succeeded": 0,
        "failed": 0,
        "active": 0,
        "suspended": 0,
    }
    if job_counted:
        entry.update(jobRestarts=job_counted, jobRestartsCountTowardsMax=job_counted)
    builder.status(
        restarts=counted + 1, restartsCountTowardsMax=counted, replicatedJobsStatus=[entry]
    )
    job = kit.job(
        "workers",
        0,
        state="failed",
        restart_attempt=counted + 1,
        job_restart_attempt=job_counted[0] if job_counted else None,
    )
    plan = kit.reconcile(builder, job, features=FeatureGates(restart_job=gate))
    if fails:
        failed = conditions(plan)["Failed"]
        assert failed["reason"] == "ReachedMaxRestarts"
        assert failed["message"] == (
            "jobset failed due to reaching max number of restarts "
            "(first failed job: trainer-workers-0)"
        )
        assert plan.status is not None
        assert plan.status["restarts"] == counted + 1
    else:
        assert plan.status is not None
        assert plan.status["restarts"] == counted + 2


def test_restart_jobset_and_ignore_max_restarts(kit: Kit) -> None:
    builder = two_workers(kit).failure_policy(
        rule("RestartJobSetAndIgnoreMaxRestarts", "maintenance"), max_restarts=0
    )
    plan = kit.reconcile(builder, kit.job("workers", 0, state="failed"))
    assert plan.status is not None
    assert plan.status["restarts"] == 1
    assert "restartsCountTowardsMax" not in plan.status
    message = (
        "applying RestartJobSetAndIgnoreMaxRestarts failure policy action "
        "(first failed job: trainer-workers-0)"
    )
    assert conditions(plan)["RestartingJobSet"]["reason"] == "FailurePolicy_maintenance"
    assert [(e.reason, e.note) for e in plan.events] == [
        ("FailurePolicy_maintenance", message),
        (RESTART_JOBSET_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT, message),
    ]


def worker_entry(plan: Plan) -> Mapping[str, Any]:
    assert plan.status is not None
    return next(e for e in plan.status["replicatedJobsStatus"] if e["name"] == "workers")


@pytest.mark.parametrize(
    ("action", "event_reason", "expected_towards_max"),
    [
        ("RestartJob", RESTART_JOB_ACTION_EVENT, [0, 1]),
        ("RestartJobAndIgnoreMaxRestarts", RESTART_JOB_AND_IGNORE_MAX_RESTARTS_ACTION_EVENT, None),
    ],
    ids=["RestartJob counts the index towards max", "ignoring max counts nothing towards max"],
)
def test_restart_job_actions_restart_one_index(
    kit: Kit, action: str, event_reason: str, expected_towards_max: list[int] | None
) -> None:
    builder = two_workers(kit).failure_policy(rule(action, "one"), max_restarts=2)
    plan = kit.reconcile(builder, kit.job("workers", 1, state="failed"), features=GATE)
    entry = worker_entry(plan)
    assert entry["jobRestarts"] == [0, 1]
    assert entry.get("jobRestartsCountTowardsMax") == expected_towards_max
    assert plan.status is not None
    assert plan.status["restarts"] == 0
    assert "RestartingJobSet" not in conditions(plan), "no Restarting condition"
    message = f"applying {action} failure policy action (first failed job: trainer-workers-1)"
    assert [(e.type, e.reason, e.note, e.after_status) for e in plan.events] == [
        ("Warning", event_reason, message, True)
    ]


def test_restart_job_fails_at_max_counting_global_and_per_job_restarts(kit: Kit) -> None:
    builder = two_workers(kit).failure_policy(rule("RestartJob", "one"), max_restarts=2)
    builder.status(
        restarts=1,
        restartsCountTowardsMax=1,
        replicatedJobsStatus=[
            {
                "name": "workers",
                "ready": 0,
                "succeeded": 0,
                "failed": 0,
                "active": 0,
                "suspended": 0,
                "jobRestarts": [1, 0],
                "jobRestartsCountTowardsMax": [1, 0],
            }
        ],
    )
    job = kit.job("workers", 0, state="failed", restart_attempt=1, job_restart_attempt=1)
    plan = kit.reconcile(builder, job, features=GATE)
    assert conditions(plan)["Failed"]["reason"] == "ReachedMaxRestarts"


def test_restart_job_while_the_gate_is_off_emits_a_warning_and_writes_no_status(kit: Kit) -> None:
    builder = two_workers(kit).failure_policy(rule("RestartJob", "one"), max_restarts=2)
    plan = kit.reconcile(builder, kit.job("workers", 0, state="failed"))
    assert plan.status is None
    assert [(e.type, e.reason, e.after_status) for e in plan.events] == [
        ("Warning", FEATURE_GATE_DISABLED_EVENT, False)
    ]
    assert "RestartJob feature gate" in plan.events[0].note


def test_failure_wins_over_success_in_the_same_pass(kit: Kit) -> None:
    builder = two_workers(kit).success_policy("Any")
    plan = kit.reconcile(
        builder,
        kit.job("leader", 0, state="succeeded"),
        kit.job("workers", 0, state="failed"),
    )
    assert "Completed" not in conditions(plan)
    assert conditions(plan)["Failed"]["reason"] == "FailedJobs"


# --- restart mechanics: the passes after the decision -------------------------------------------


def after_restart(kit: Kit, strategy: str | None) -> JobSetBuilder:
    builder = two_workers(kit).failure_policy(max_restarts=3, restart_strategy=strategy)
    return builder.status(restarts=1, restartsCountTowardsMax=1)


def test_next_pass_deletes_every_job_of_the_old_attempt(kit: Kit) -> None:
    plan = kit.reconcile(
        after_restart(kit, None),
        kit.job("leader", 0, state="succeeded"),
        kit.job("workers", 0, state="failed"),
        kit.job("workers", 1, state="ready", deleting=True),
    )
    assert sorted(d.name for d in plan.jobs_to_delete) == ["trainer-leader-0", "trainer-workers-0"]
    assert {d.uid for d in plan.jobs_to_delete} == {
        "uid-trainer-leader-0-0",
        "uid-trainer-workers-0-0",
    }
    assert plan.jobs_to_create == (), "every name is still taken"


def test_recreate_recreates_each_job_once_its_predecessor_is_gone(kit: Kit) -> None:
    plan = kit.reconcile(
        after_restart(kit, "Recreate"), kit.job("workers", 1, state="ready", deleting=True)
    )
    created = {job["metadata"]["name"]: job for job in plan.jobs_to_create}
    assert sorted(created) == ["trainer-leader-0", "trainer-workers-0"]
    labels = created["trainer-workers-0"]["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/restart-attempt"] == "1"
    assert plan.jobs_to_delete == (), "a Job being deleted is not deleted again"


def test_blocking_recreate_waits_until_every_previous_job_is_gone(kit: Kit) -> None:
    builder = after_restart(kit, "BlockingRecreate")
    waiting = kit.reconcile(builder, kit.job("workers", 1, state="ready", deleting=True))
    assert waiting.jobs_to_create == ()
    assert [job["metadata"]["name"] for job in kit.reconcile(builder).jobs_to_create] == [
        "trainer-leader-0",
        "trainer-workers-0",
        "trainer-workers-1",
    ]


def test_blocking_recreate_does_not_wait_for_current_attempt_jobs(kit: Kit) -> None:
    plan = kit.reconcile(
        after_restart(kit, "BlockingRecreate"), kit.job("leader", 0, restart_attempt=1)
    )
    assert [job["metadata"]["name"] for job in plan.jobs_to_create] == [
        "trainer-workers-0",
        "trainer-workers-1",
    ]


def test_restart_job_next_pass_deletes_only_that_index(kit: Kit) -> None:
    builder = two_workers(kit).failure_policy(rule("RestartJob", "one"), max_restarts=2)
    builder.status(
        restarts=0,
        replicatedJobsStatus=[
            {
                "name": "workers",
                "ready": 0,
                "succeeded": 0,
                "failed": 1,
                "active": 0,
                "suspended": 0,
                "jobRestarts": [0, 1],
                "jobRestartsCountTowardsMax": [0, 1],
            }
        ],
    )
    plan = kit.reconcile(
        builder,
        kit.job("leader", 0, job_restart_attempt=0),
        kit.job("workers", 0, job_restart_attempt=0),
        kit.job("workers", 1, state="failed", job_restart_attempt=0),
        features=GATE,
    )
    assert [d.name for d in plan.jobs_to_delete] == ["trainer-workers-1"]
    assert plan.events == ()


def test_jobs_ready_after_a_restart_clears_restarting(kit: Kit) -> None:
    builder = two_workers(kit).status(restarts=1, restartsCountTowardsMax=1)
    builder.condition("RestartingJobSet", "True", "DefaultFailurePolicy", "m")
    jobs = kit.running(builder, state="ready", restart_attempt=1)
    plan = kit.reconcile(builder, *jobs, service=kit.service())
    restarting = conditions(plan)["RestartingJobSet"]
    assert (restarting["status"], restarting["reason"], restarting["message"]) == (
        "False",
        "JobsReady",
        "all jobs are ready",
    )
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "JobsReady")]


def test_jobs_ready_without_a_restart_adds_no_condition(kit: Kit) -> None:
    builder = two_workers(kit)
    plan = kit.reconcile(builder, *kit.running(builder, state="ready"), service=kit.service())
    assert plan.status is not None
    assert "conditions" not in plan.status
    assert plan.events == ()
