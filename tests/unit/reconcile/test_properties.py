"""Properties of reconcile over generated JobSets and child Jobs (hypothesis).

A scenario is 1-3 replicatedJobs (0-4 replicas each) with random startup, success and failure
policies, suspension, gates and prior status, plus a random set of child Jobs of the current or
earlier attempts in every state. Checked on every scenario:

1. no create for a name that exists in the snapshot;
2. a JobSet that was running (not finished) never loses a current-attempt Job;
3. the replicatedJobsStatus after the pass matches a recount of the children;
4. convergence: carrying the Plan out and reconciling again, with nothing else changing,
   reaches an empty Plan within a few passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobset_controller.api import (
    JOB_RESTART_ATTEMPT_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
    FeatureGates,
)
from jobset_controller.reconcile import Plan, Snapshot, reconcile

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import Kit

RJOB_NAMES = ["driver", "workers", "ps"]
STATES = ["pending", "active", "ready", "succeeded", "failed"]
REASONS = ["BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy"]
MESSAGES = ["exit code 42", "node lost", "OOMKilled in container main"]
PATTERNS = ["exit code", "^node", "OOM.*main", "(unclosed"]
TIMES = ["2025-06-01T11:00:00Z", "2025-06-01T11:30:00Z", "2025-06-01T11:45:00Z"]
PRIOR_CONDITIONS = [
    ("Suspended", "True", "SuspendedJobs", "jobset is suspended"),
    ("Suspended", "False", "ResumeJobs", "jobset is resumed"),
    ("RestartingJobSet", "True", "DefaultFailurePolicy", "restarting"),
    ("StartupPolicyInProgress", "True", "InOrderStartupPolicyInProgress", "in progress"),
    ("Completed", "True", "AllJobsCompleted", "jobset completed successfully"),
]
SETTLE_PASSES = 8


@dataclass
class RJob:
    name: str
    replicas: int
    parallelism: int
    completions: int | None
    depends_on: list[tuple[str, str]] | None


@dataclass
class Child:
    rjob: str
    index: int
    state: str
    attempt_offset: int  # restarts - this; 0 = current attempt
    job_attempt_offset: int
    suspended: bool
    started: bool
    deleting: bool
    reason: str
    message: str
    finished_at: str
    parallelism: int


@dataclass
class Scenario:
    rjobs: list[RJob]
    suspend: bool
    in_order: bool
    success: tuple[str, list[str]] | None
    failure: tuple[int, str, list[dict[str, Any]]] | None
    restarts: int
    towards_max: int
    restart_job_gate: bool
    elastic_gate: bool
    job_restarts: dict[str, list[int]]
    prior: list[tuple[str, str, str, str]]
    children: list[Child] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    count = draw(st.integers(1, 3))
    in_order = draw(st.booleans())
    rjobs: list[RJob] = []
    for position, name in enumerate(RJOB_NAMES[:count]):
        parallelism = draw(st.integers(1, 3))
        completions = draw(st.sampled_from([parallelism, None]))
        depends_on = None
        if position > 0 and not in_order and draw(st.booleans()):
            dependency = draw(st.sampled_from(RJOB_NAMES[:position]))
            depends_on = [(dependency, draw(st.sampled_from(["Ready", "Complete"])))]
        rjobs.append(RJob(name, draw(st.integers(0, 4)), parallelism, completions, depends_on))
    names = [rjob.name for rjob in rjobs]
    restart_job_gate = draw(st.booleans())
    success = None
    if draw(st.booleans()):
        operator = draw(st.sampled_from(["All", "Any"]))
        success = (operator, draw(st.lists(st.sampled_from(names), unique=True, max_size=2)))
    failure = None
    if draw(st.booleans()):
        actions = ["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"]
        if restart_job_gate:
            actions += ["RestartJob", "RestartJobAndIgnoreMaxRestarts"]
        rules = [
            {
                "action": draw(st.sampled_from(actions)),
                "onJobFailureReasons": draw(st.lists(st.sampled_from(REASONS), max_size=2)),
                "onJobFailureMessagePatterns": draw(
                    st.lists(st.sampled_from(PATTERNS), max_size=2)
                ),
                "targetReplicatedJobs": draw(
                    st.lists(st.sampled_from(names), unique=True, max_size=2)
                ),
            }
            for _ in range(draw(st.integers(0, 2)))
        ]
        strategy = draw(st.sampled_from(["Recreate", "BlockingRecreate"]))
        failure = (draw(st.integers(0, 3)), strategy, rules)
    restarts = draw(st.integers(0, 2))
    job_restarts: dict[str, list[int]] = {}
    if restart_job_gate:
        for rjob in rjobs:
            if rjob.replicas and draw(st.booleans()):
                job_restarts[rjob.name] = draw(
                    st.lists(st.integers(0, 1), min_size=rjob.replicas, max_size=rjob.replicas)
                )
    scenario = Scenario(
        rjobs=rjobs,
        suspend=draw(st.booleans()),
        in_order=in_order,
        success=success,
        failure=failure,
        restarts=restarts,
        towards_max=draw(st.integers(0, restarts)),
        restart_job_gate=restart_job_gate,
        elastic_gate=draw(st.booleans()),
        job_restarts=job_restarts,
        prior=draw(
            st.lists(st.sampled_from(PRIOR_CONDITIONS), max_size=2, unique_by=lambda c: c[0])
        ),
    )
    for rjob in rjobs:
        targets = job_restarts.get(rjob.name, [0] * rjob.replicas)
        for index in range(rjob.replicas):
            if not draw(st.booleans()):
                continue
            scenario.children.append(
                Child(
                    rjob=rjob.name,
                    index=index,
                    state=draw(st.sampled_from(STATES)),
                    attempt_offset=draw(st.integers(0, restarts)) if draw(st.booleans()) else 0,
                    job_attempt_offset=draw(st.integers(0, targets[index])),
                    suspended=draw(st.booleans()),
                    started=draw(st.booleans()),
                    deleting=draw(st.integers(0, 5)) == 0,
                    reason=draw(st.sampled_from(REASONS)),
                    message=draw(st.sampled_from(MESSAGES)),
                    finished_at=draw(st.sampled_from(TIMES)),
                    parallelism=draw(st.integers(1, 3)),
                )
            )
    return scenario


def snapshot_of(kit: Kit, scenario: Scenario) -> Snapshot:
    builder = kit.jobset()
    for rjob in scenario.rjobs:
        builder.replicated_job(
            rjob.name,
            replicas=rjob.replicas,
            parallelism=rjob.parallelism,
            completions=rjob.completions,
            depends_on=rjob.depends_on,
        )
    builder.suspend(scenario.suspend)
    if scenario.in_order:
        builder.in_order()
    if scenario.success is not None:
        builder.success_policy(scenario.success[0], *scenario.success[1])
    if scenario.failure is not None:
        max_restarts, strategy, rules = scenario.failure
        builder.failure_policy(*rules, max_restarts=max_restarts, restart_strategy=strategy)
    entries = []
    for rjob in scenario.rjobs:
        entry: dict[str, Any] = {
            "name": rjob.name,
            "ready": 0,
            "succeeded": 0,
            "failed": 0,
            "active": 0,
            "suspended": 0,
        }
        if rjob.name in scenario.job_restarts:
            entry["jobRestarts"] = scenario.job_restarts[rjob.name]
            entry["jobRestartsCountTowardsMax"] = scenario.job_restarts[rjob.name]
        entries.append(entry)
    builder.status(
        restarts=scenario.restarts,
        restartsCountTowardsMax=scenario.towards_max,
        replicatedJobsStatus=entries,
    )
    for type_, status, reason, message in scenario.prior:
        builder.condition(type_, status, reason, message)
    jobs = []
    for child in scenario.children:
        target = scenario.job_restarts.get(child.rjob, [0] * 5)[child.index]
        completions = next(r.completions for r in scenario.rjobs if r.name == child.rjob)
        jobs.append(
            kit.job(
                child.rjob,
                child.index,
                state=child.state,
                restart_attempt=scenario.restarts - child.attempt_offset,
                job_restart_attempt=(
                    target - child.job_attempt_offset if scenario.restart_job_gate else None
                ),
                parallelism=child.parallelism,
                completions=completions,
                suspended=child.suspended,
                reason=child.reason,
                message=child.message,
                finished_at=child.finished_at,
                start_time=kit.earlier_text if child.started else None,
                deleting=child.deleting,
            )
        )
    features = FeatureGates(
        restart_job=scenario.restart_job_gate, elastic_job_set=scenario.elastic_gate
    )
    return kit.snapshot(builder, *jobs, features=features)


def is_current(snapshot: Snapshot, job: Any) -> bool:
    """Restates docs/behaviour.md#classification: the Job belongs to the current attempt."""
    labels = job["metadata"]["labels"]
    status = snapshot.jobset.status
    if int(labels[RESTARTS_KEY]) < status.restarts:
        return False
    if snapshot.features.restart_job and JOB_RESTART_ATTEMPT_KEY in labels:
        rjob = labels[REPLICATED_JOB_NAME_KEY]
        entry = next((e for e in status.replicated_jobs_status if e.name == rjob), None)
        targets = entry.job_restarts if entry is not None else []
        index = int(labels["jobset.sigs.k8s.io/job-index"])
        target = targets[index] if index < len(targets) else 0
        return int(labels[JOB_RESTART_ATTEMPT_KEY]) >= target
    return True


def is_finished(snapshot: Snapshot) -> bool:
    return any(
        c.type in ("Completed", "Failed") and c.status == "True"
        for c in snapshot.jobset.status.conditions
    )


def recount(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    counts = {
        rjob.name: {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
        for rjob in snapshot.jobset.spec.replicated_jobs
    }
    for job in snapshot.jobs:
        if not is_current(snapshot, job):
            continue
        entry = counts[job["metadata"]["labels"][REPLICATED_JOB_NAME_KEY]]
        true_types = {
            c["type"] for c in job["status"].get("conditions", []) if c["status"] == "True"
        }
        if "Complete" in true_types:
            entry["succeeded"] += 1
        elif "Failed" in true_types:
            entry["failed"] += 1
        else:
            spec, status = job["spec"], job["status"]
            needed = min(spec["parallelism"], spec.get("completions") or spec["parallelism"])
            entry["ready"] += status.get("ready", 0) + status.get("succeeded", 0) >= needed
            entry["active"] += status.get("active", 0) > 0
            entry["suspended"] += spec.get("suspend") is True
    return counts


COMMON = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@COMMON
@given(scenario=scenarios())
def test_never_creates_a_job_whose_name_exists(kit: Kit, scenario: Scenario) -> None:
    snapshot = snapshot_of(kit, scenario)
    existing = {job["metadata"]["name"] for job in snapshot.jobs}
    plan = reconcile(snapshot)
    created = {job["metadata"]["name"] for job in plan.jobs_to_create}
    assert not created & existing


@COMMON
@given(scenario=scenarios())
def test_running_jobset_never_deletes_a_current_attempt_job(kit: Kit, scenario: Scenario) -> None:
    snapshot = snapshot_of(kit, scenario)
    plan = reconcile(snapshot)
    if is_finished(snapshot):
        return
    by_name = {job["metadata"]["name"]: job for job in snapshot.jobs}
    for delete in plan.jobs_to_delete:
        job = by_name[delete.name]
        assert not is_current(snapshot, job), f"{delete.name} is of the current attempt"
        assert not job["metadata"].get("deletionTimestamp"), f"{delete.name} is already deleting"


@COMMON
@given(scenario=scenarios())
def test_replicated_jobs_status_matches_the_children_and_is_written_name_descending(
    kit: Kit, scenario: Scenario
) -> None:
    snapshot = snapshot_of(kit, scenario)
    plan = reconcile(snapshot)
    status = plan.status if plan.status is not None else snapshot.jobset.to_dict()["status"]
    keys = ("ready", "succeeded", "failed", "active", "suspended")
    written = {
        entry["name"]: {key: entry[key] for key in keys} for entry in status["replicatedJobsStatus"]
    }
    assert written == recount(snapshot)
    if plan.status is not None:  # upstream's order (reconcile/status.py), whatever the spec's
        names = [e["name"] for e in status["replicatedJobsStatus"]]
        assert names == sorted((r.name for r in scenario.rjobs), reverse=True)


@COMMON
@given(scenario=scenarios())
def test_carrying_out_plans_converges_to_an_empty_plan(kit: Kit, scenario: Scenario) -> None:
    snapshot: Snapshot | None = snapshot_of(kit, scenario)
    plans: list[Plan] = []
    for _ in range(SETTLE_PASSES):
        assert snapshot is not None
        plan = reconcile(snapshot)
        plans.append(plan)
        if plan.is_empty():
            return
        snapshot = kit.apply_plan(snapshot, plan)
        if snapshot is None:
            return
    raise AssertionError(f"no empty plan after {SETTLE_PASSES} passes; last: {plans[-1]}")


@COMMON
@given(scenario=scenarios())
def test_completed_and_failed_are_reported_once(kit: Kit, scenario: Scenario) -> None:
    snapshot: Snapshot | None = snapshot_of(kit, scenario)
    completions = failures = 0
    for _ in range(SETTLE_PASSES):
        assert snapshot is not None
        plan = reconcile(snapshot)
        completions += plan.completed
        failures += plan.failed
        snapshot = kit.apply_plan(snapshot, plan)
        if snapshot is None or plan.is_empty():
            break
    assert completions + failures <= 1
