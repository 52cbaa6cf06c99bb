"""The soak's invariants, one test per promise, on hand-made records."""

from __future__ import annotations

import random
from typing import Any, cast

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.soak import checks, mix
from jobset_controller_dev.soak.observer import JobSeen, Observer, Record


def record(shape: str = "all", **fields: object) -> Record:
    workload = mix.build(f"soak-00001-{shape}", shape, random.Random(0))
    made = Record(workload=workload, created=0.0, last_progress=0.0)
    for key, value in fields.items():
        setattr(made, key, value)
    return made


def kinds(found: list[checks.Violation]) -> list[str]:
    return [v.kind for v in found]


def test_a_jobset_that_reached_its_promised_state_breaks_nothing() -> None:
    done = record(terminal="Completed", terminal_seen=10.0, restarts_at_terminal=0,
                  pod_event_before_terminal=9.0, events={"AllJobsCompleted"})  # fmt: skip
    assert checks.final([done], now=1000.0) == []


def test_a_jobset_without_a_terminal_condition_is_not_finished() -> None:
    assert kinds(checks.outcome(record())) == ["not-finished"]


def test_the_wrong_terminal_condition_or_restart_count_is_a_violation() -> None:
    failed = record("restart-once", terminal="Failed", restarts_at_terminal=3, failed_by_us={0})
    assert kinds(checks.outcome(failed)) == ["wrong-terminal", "wrong-restarts"]


def test_an_injected_failure_whose_pod_succeeded_first_promises_no_restart() -> None:
    # On a loaded machine the pod can end Succeeded before the soak's patch lands.
    missed = record("restart-once", terminal="Completed", restarts_at_terminal=0)
    assert checks.outcome(missed) == []
    landed = record("restart-once", terminal="Completed", restarts_at_terminal=0, failed_by_us={0})
    assert kinds(checks.outcome(landed)) == ["wrong-restarts"]


def test_jobs_of_an_attempt_beyond_the_restart_count_are_a_violation() -> None:
    extra = record(terminal="Completed", restarts_at_terminal=0,
                   jobs={"u": JobSeen(1, "2026-11-28T10:00:00Z", False)})  # fmt: skip
    assert kinds(checks.outcome(extra)) == ["attempt-beyond-restarts"]


def test_a_job_of_an_older_attempt_created_after_a_newer_one_is_a_violation() -> None:
    jobs = {"old": JobSeen(0, "2026-11-28T10:00:05Z", True),
            "new": JobSeen(1, "2026-11-28T10:00:01Z", True)}  # fmt: skip
    assert kinds(checks.attempt_order(record(jobs=jobs))) == ["attempt-order"]


def test_an_active_job_of_an_attempt_created_after_the_restart_moved_past_it_is_stale() -> None:
    jobs = {"old": JobSeen(0, "2026-11-28T10:00:05Z", True)}
    late = record(
        jobs=jobs, restart_seen_wall={0: "2026-11-28T09:59:00Z", 1: "2026-11-28T10:00:02Z"}
    )
    assert kinds(checks.attempt_order(late)) == ["stale-attempt"]


def test_active_jobs_long_after_finishing_are_a_violation_and_soon_after_are_not() -> None:
    jobs = {"u": JobSeen(0, "2026-11-28T10:00:00Z", True)}
    finished = record(terminal="Completed", terminal_seen=100.0, jobs=jobs)
    assert checks.settled(finished, now=100.0 + checks.SETTLE_BOUND - 1) == []
    assert kinds(checks.settled(finished, now=100.0 + checks.SETTLE_BOUND + 1)) == [
        "active-after-finish"
    ]


def test_a_ttl_jobset_still_there_after_the_bound_is_a_violation() -> None:
    kept = record("ttl", terminal="Completed", terminal_seen=0.0)
    assert kinds(checks.settled(kept, now=checks.SETTLE_BOUND + 1)) == ["ttl-not-deleted"]


def test_a_terminal_condition_long_after_the_last_pod_event_is_slow() -> None:
    late = record(terminal="Completed", terminal_seen=500.0, pod_event_before_terminal=10.0)
    assert checks.latency(late) == 490.0
    assert kinds(checks.slow(late)) == ["slow-terminal"]


def test_a_slow_terminal_condition_soon_after_a_late_job_end_is_the_job_controllers() -> None:
    late_job = record(terminal="Completed", terminal_seen=500.0, pod_event_before_terminal=10.0,
                      job_end_before_terminal=498.0)  # fmt: skip
    assert kinds(checks.slow(late_job)) == ["slow-job-end"]
    ours = record(terminal="Completed", terminal_seen=500.0, pod_event_before_terminal=10.0,
                  job_end_before_terminal=300.0)  # fmt: skip
    assert kinds(checks.slow(ours)) == ["slow-terminal"]


def test_missing_terminal_and_restart_events_are_violations() -> None:
    quiet = record("restart-once", terminal="Completed", restarts_at_terminal=1, events=set())
    assert kinds(checks.events(quiet)) == ["no-terminal-event", "no-restart-event"]


def test_a_jobset_idle_past_the_limit_is_stuck_unless_suspended_or_finished() -> None:
    idle = record(last_progress=0.0)
    assert checks.stuck(idle, now=301.0, limit=300.0) is not None
    assert checks.stuck(idle, now=299.0, limit=300.0) is None
    assert checks.stuck(record(suspended=True), now=1000.0, limit=300.0) is None
    assert checks.stuck(record(terminal="Failed"), now=1000.0, limit=300.0) is None


def test_a_ttl_jobset_is_finished_only_once_deleted() -> None:
    assert not checks.finished(record("ttl", terminal="Completed"))
    assert checks.finished(record("ttl", terminal="Completed", deleted_seen=3.0))
    assert checks.finished(record(terminal="Failed"))


def test_percentile_picks_from_the_sorted_values() -> None:
    assert checks.percentile([], 0.5) is None
    assert checks.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert checks.percentile([float(i) for i in range(100)], 0.99) == 99.0


def test_the_janitor_takes_a_jobset_only_once_and_only_after_the_settle_bound() -> None:
    done = record(terminal="Completed", terminal_seen=10.0)
    assert not checks.ripe(record(), now=1000.0)
    assert not checks.ripe(done, now=10.0 + checks.SETTLE_BOUND - 1)
    assert checks.ripe(done, now=10.0 + checks.SETTLE_BOUND)
    done.judged = True
    assert not checks.ripe(done, now=1000.0)


def test_the_janitor_leaves_a_jobset_its_ttl_deletes_to_the_end() -> None:
    ttl = record("ttl", terminal="Completed", terminal_seen=10.0)
    assert ttl.workload.expect.deleted_after is not None
    assert not checks.ripe(ttl, now=1000.0)


def test_a_jobset_kueue_still_holds_at_the_end_is_queued_not_a_broken_promise() -> None:
    waiting = record("queued-low", suspended=True)
    assert checks.queued(waiting)
    assert checks.outcome(waiting) == []
    assert not checks.finished(waiting)


def test_a_jobset_kueue_admitted_that_never_finished_is_still_not_finished() -> None:
    admitted = record("queued-low", suspended=False)
    assert not checks.queued(admitted)
    assert kinds(checks.outcome(admitted)) == ["not-finished"]


def test_a_missing_event_of_a_transition_next_to_a_leader_sigkill_is_excused() -> None:
    # The status and the Event are two writes: a leader killed between them loses the Event.
    killed = record(terminal="Completed", terminal_seen=100.0, restarts_at_terminal=0)
    assert kinds(checks.events(killed)) == ["no-terminal-event"]
    assert checks.events(killed, kills=[100.0 + checks.KILL_WINDOW]) == []
    assert kinds(checks.events(killed, kills=[100.0 + checks.KILL_WINDOW + 1])) == [
        "no-terminal-event"
    ]


def test_a_missing_restart_event_next_to_a_leader_sigkill_is_excused() -> None:
    restarted = record(
        terminal="Completed",
        terminal_seen=300.0,
        restarts_at_terminal=1,
        restart_seen={0: 10.0, 1: 100.0},
        events={"AllJobsCompleted"},
    )
    assert kinds(checks.events(restarted)) == ["no-restart-event"]
    assert checks.events(restarted, kills=[95.0]) == []


def test_the_controllers_latency_runs_from_the_last_job_end_before_the_terminal() -> None:
    done = record(terminal="Completed", terminal_seen=50.0, pod_event_before_terminal=10.0,
                  job_end_before_terminal=48.5)  # fmt: skip
    assert checks.latency(done) == 40.0  # the Job controller took 38.5 s of it
    assert checks.controller_latency(done) == 1.5
    assert checks.controller_latency(record(terminal="Completed", terminal_seen=50.0)) is None
    assert checks.controller_latency(record(job_end_before_terminal=48.5)) is None


def test_the_observer_takes_a_jobs_end_when_its_finished_condition_first_appears() -> None:
    observer = Observer(cast(KubeClient, None), "soak")
    seen = observer.expect(mix.build("soak-00001-all", "all", random.Random(0)))

    def job(*conditions: str) -> dict[str, Any]:
        labels = {JOBSET_NAME_KEY: "soak-00001-all"}
        status = {"conditions": [{"type": c, "status": "True"} for c in conditions]}
        return {"metadata": {"uid": "u1", "labels": labels}, "status": status}

    observer._job("ADDED", job())
    assert seen.last_job_end is None
    observer._job("MODIFIED", job("Complete"))
    assert seen.last_job_end is not None
    seen.last_job_end = -1.0  # marked: a later update of the finished Job must not move it
    observer._job("MODIFIED", job("Complete", "SuccessCriteriaMet"))
    assert seen.last_job_end == -1.0
