"""The soak's invariants over the observed records: each a small pure function returning the
violations it finds, as `Violation(kind, jobset, detail)`.

Why pure: each rule is one promise of the JobSet contract (terminal state, restart count, attempt
order, children deleted, Events written) and is unit-tested on hand-made records; the soak only
feeds it what it saw. The bounds are generous on purpose: a leader failover waits for the Lease
to expire (15 s) and for the new leader's caches, an API server restart for every relist, and a
violation must mean a broken promise, not a slow machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from jobset_controller_dev.soak.observer import Record

# Seconds from a JobSet's last pod event to its terminal condition, and from the terminal
# condition to its active Jobs (or, with a TTL, itself) being gone.
SETTLE_BOUND: Final = 120.0
TERMINAL_REASONS: Final = {
    "Completed": {"AllJobsCompleted"},
    "Failed": {"FailedJobs", "FailJobSetFailurePolicyAction", "ReachedMaxRestarts"},
}
# Seconds around a SIGKILL of the leader in which a transition's missing Event is excused: the
# status write and the Event write are two requests, and a process killed between them loses the
# second with its memory (no controller can promise otherwise; the next leader sees the state
# already written and has no transition to report).
KILL_WINDOW: Final = 10.0
RESTART_REASONS: Final = {
    "RestartJobSetFailurePolicyAction",
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
}


@dataclass(frozen=True)
class Violation:
    kind: str
    jobset: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.jobset}: {self.detail}"


def outcome(record: Record) -> list[Violation]:
    """Terminal condition and `status.restarts` as the policies promise; the restarts counted
    equal the attempts whose Jobs existed."""
    name, expect = record.workload.name, record.workload.expect
    found = []
    if queued(record):
        return []  # Kueue's backlog, not a promise of the controller's (`queued`)
    if record.terminal is None:
        return [
            Violation("not-finished", name, f"no terminal condition (restarts {record.restarts})")
        ]
    if record.terminal != expect.terminal:
        found.append(
            Violation("wrong-terminal", name, f"{record.terminal}, expected {expect.terminal}")
        )
    # A failure the soak meant to inject but whose pod succeeded first promised no restart.
    promised = expect.restarts - len(record.workload.inject - record.failed_by_us)
    if record.restarts_at_terminal != promised:
        found.append(
            Violation(
                "wrong-restarts",
                name,
                f"status.restarts {record.restarts_at_terminal}, expected {promised}",
            )
        )
    attempts = {job.attempt for job in record.jobs.values()}
    if attempts and max(attempts) > (record.restarts_at_terminal or 0):
        found.append(
            Violation("attempt-beyond-restarts", name, f"Jobs of attempts {sorted(attempts)}")
        )
    return found


def attempt_order(record: Record) -> list[Violation]:
    """No Job of an older attempt created after a Job of a newer one, nor after the JobSet's
    restart count had moved past its attempt (seconds resolution, as creationTimestamp)."""
    found = []
    jobs = list(record.jobs.values())
    for old in jobs:
        for new in jobs:
            if old.attempt < new.attempt and old.created > new.created:
                found.append(
                    Violation(
                        "attempt-order",
                        record.workload.name,
                        f"attempt {old.attempt} Job created {old.created}, "
                        f"after attempt {new.attempt}'s at {new.created}",
                    )
                )
                return found
        later = [seen for count, seen in record.restart_seen_wall.items() if count > old.attempt]
        if later and old.created > min(later) and old.active:
            found.append(
                Violation(
                    "stale-attempt",
                    record.workload.name,
                    f"attempt {old.attempt} Job created {old.created}, restarts moved past "
                    f"it at {min(later)}",
                )
            )
            return found
    return found


def settled(record: Record, now: float, bound: float = SETTLE_BOUND) -> list[Violation]:
    """Within `bound` s of finishing: no active Job left; with a TTL, the JobSet and its Jobs
    gone."""
    if record.terminal_seen is None or now - record.terminal_seen < bound:
        return []
    name, found = record.workload.name, []
    if record.workload.expect.deleted_after is not None:
        if record.deleted_seen is None:
            found.append(Violation("ttl-not-deleted", name, "still exists after its TTL"))
        elif record.jobs:
            found.append(Violation("orphan-jobs", name, f"{len(record.jobs)} Jobs left"))
    active = [j for j in record.jobs.values() if j.active]
    if active:
        found.append(Violation("active-after-finish", name, f"{len(active)} active Jobs"))
    return found


def _to_terminal(record: Record, since: float | None) -> float | None:
    if record.terminal_seen is None or since is None:
        return None
    return max(0.0, record.terminal_seen - since)


def latency(record: Record) -> float | None:
    """Seconds from the last pod event before the terminal condition to the condition."""
    return _to_terminal(record, record.pod_event_before_terminal)


def controller_latency(record: Record) -> float | None:
    """Seconds from the last Job end seen before the terminal condition to the condition: the
    controller's share of `latency` (the rest is the Job controller counting the pods); None
    when the JobSet ended with no Job finished (a JobSet judged by its pods alone, or none)."""
    return _to_terminal(record, record.job_end_before_terminal)


def slow(record: Record, bound: float = SETTLE_BOUND) -> list[Violation]:
    """A terminal condition more than `bound` s after the last pod event: `slow-job-end` when
    the controller set it within `bound` s of its last Job's end (the Job controller counted the
    pods late), `slow-terminal` otherwise. Both are violations; the kind says whose wait it was."""
    took = latency(record)
    if took is None or took <= bound:
        return []
    after_job = controller_latency(record)
    if after_job is not None and after_job <= bound:
        return [
            Violation(
                "slow-job-end",
                record.workload.name,
                f"{took:.0f} s after its last pod event, {after_job:.0f} s after its last Job end",
            )
        ]
    return [
        Violation("slow-terminal", record.workload.name, f"{took:.0f} s after its last pod event")
    ]


def _near(moment: float | None, kills: Sequence[float]) -> bool:
    return moment is not None and any(abs(kill - moment) <= KILL_WINDOW for kill in kills)


def events(record: Record, kills: Sequence[float] = ()) -> list[Violation]:
    """An Event for the terminal transition and, after restarts, one for the restart (Events
    are kept an hour by the API server, longer than any record here waits); a transition seen
    within `KILL_WINDOW` of a SIGKILL of the leader (`kills`, monotonic) is excused."""
    if record.terminal is None or record.deleted_seen is not None:
        return []
    found = []
    terminal_excused = _near(record.terminal_seen, kills)
    if not record.events & TERMINAL_REASONS[record.terminal] and not terminal_excused:
        found.append(
            Violation("no-terminal-event", record.workload.name, f"events {sorted(record.events)}")
        )
    restart_excused = any(_near(seen, kills) for seen in record.restart_seen.values())
    if (
        (record.restarts_at_terminal or 0) > 0
        and not record.events & RESTART_REASONS
        and not restart_excused
    ):
        found.append(
            Violation("no-restart-event", record.workload.name, f"events {sorted(record.events)}")
        )
    return found


def stuck(record: Record, now: float, limit: float) -> Violation | None:
    """Not terminal, not held by Kueue (suspended), and nothing changed for `limit` s."""
    if record.terminal is not None or record.suspended or record.deleted_seen is not None:
        return None
    idle = now - record.last_progress
    if idle > limit:
        return Violation("stuck", record.workload.name, f"no progress for {idle:.0f} s")
    return None


def final(
    records: Iterable[Record],
    now: float,
    bound: float = SETTLE_BOUND,
    kills: Sequence[float] = (),
) -> list[Violation]:
    found: list[Violation] = []
    for record in records:
        found += outcome(record) + attempt_order(record)
        found += settled(record, now, bound) + slow(record, bound)
        found += events(record, kills)
    return found


def ripe(record: Record, now: float, bound: float = SETTLE_BOUND) -> bool:
    """Ready for the janitor: finished `bound` s ago, not yet judged, and not a JobSet its TTL
    deletes (those are judged on their own deletion, at the end)."""
    if record.judged or record.terminal_seen is None or record.deleted_seen is not None:
        return False
    if record.workload.expect.deleted_after is not None:
        return False
    return now - record.terminal_seen >= bound


def queued(record: Record) -> bool:
    """Not terminal and suspended: waiting for Kueue to admit it (again). Only Kueue sets
    `spec.suspend` here, so a JobSet Kueue admitted and the controller then failed to run is not
    queued: the stuck rule catches it. Reported as a count, not as a violation: how much the
    queues hold at the end is the soak's quota against its arrival rate."""
    return record.terminal is None and record.suspended and record.deleted_seen is None


def finished(record: Record) -> bool:
    """Terminal, and (for a TTL) deleted: nothing more will happen to it."""
    if record.terminal is None:
        return False
    return record.workload.expect.deleted_after is None or record.deleted_seen is not None


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
