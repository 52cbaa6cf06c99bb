"""The leader's RSS over a soak, and the growth figure the issue judges (< 5% over the second half).

What the figure compares decides what it can find. No process lives across a soak's second half:
a leader fault every few minutes and the Lease-loss exits at each API server restart make every
replica a new process every few minutes. So the figure compares warm leaders (each sampled once
it has led `WARM_SECONDS`) early in the second half with warm leaders at its end: a controller
that keeps more per object over time, or leaves objects behind for the next leader to list, shows
there; a leak that a restart ends does not, and cannot under this schedule.

A burst is not a leak but would read as one: its 500 JobSets raise the RSS of every process alive
while they exist (informers run on followers too), and CPython keeps the arenas it freed. The
hour of 2026-11-29 read +5.4% with a burst's leader in its last tenth. So the judged figure
(`steady_growth`) leaves out every sample of a process that was alive while a burst's JobSets
existed (from the burst until its drain bound and the janitor's delay have passed), and compares
the first fifth of the second half's steady samples with the last fifth (by time: a fixed tenth
can hold no steady sample). The old figure (`warm_growth`: every warm sample, the tenth after the
middle against the last tenth) is kept beside it, and each process's own growth over its steady
life (`life_growth`, the longest life) shows what a single process does.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RssSample:
    at: float  # s into the run
    life: str  # the process: replica name and life number, e.g. "ours-0#3"
    born: float  # s into the run the process started
    rss: int  # bytes


@dataclass(frozen=True)
class Memory:
    warm_growth: float | None  # every warm sample: tenth after the middle vs the last tenth
    steady_growth: float | None  # samples of processes no burst touched; the judged figure
    steady_samples: int  # in the second half
    life_growth: float | None  # the longest steady life: its last minute vs its first
    life: str  # that life, e.g. "ours-1#7 (412 s)"


def touched_by_burst(sample: RssSample, bursts: Sequence[float], span: float) -> bool:
    """Whether the sample's process was alive while a burst's JobSets existed: some burst at
    `b` with its window [b, b + span] overlapping the process's life up to the sample."""
    return any(b <= sample.at and b + span >= sample.born for b in bursts)


def _growth(before: Sequence[int], after: Sequence[int]) -> float | None:
    if not before or not after:
        return None
    base = statistics.median(before)
    return (statistics.median(after) - base) / base


def warm_growth(samples: Sequence[RssSample], duration: float) -> float | None:
    """Median of the last tenth against the median of the tenth after the middle."""
    middle = [s.rss for s in samples if duration / 2 <= s.at < duration * 0.6]
    last = [s.rss for s in samples if s.at >= duration * 0.9]
    return _growth(middle, last)


def steady_growth(
    samples: Sequence[RssSample], bursts: Sequence[float], span: float, duration: float
) -> tuple[float | None, int]:
    """Second half's samples of processes no burst touched, ordered by time: the median of the
    last fifth against the median of the first fifth; and how many samples there were."""
    steady = sorted(
        (s for s in samples if s.at >= duration / 2 and not touched_by_burst(s, bursts, span)),
        key=lambda s: s.at,
    )
    fifth = len(steady) // 5
    if fifth == 0:
        return None, len(steady)
    return _growth([s.rss for s in steady[:fifth]], [s.rss for s in steady[-fifth:]]), len(steady)


def longest_life(
    samples: Sequence[RssSample], bursts: Sequence[float], span: float, minute: float = 60.0
) -> tuple[float | None, str]:
    """The steady process sampled over the longest time: the median of its last `minute` of
    samples against its first `minute`'s (None when no life spans two minutes)."""
    lives: dict[str, list[RssSample]] = {}
    for sample in samples:
        if not touched_by_burst(sample, bursts, span):
            lives.setdefault(sample.life, []).append(sample)
    if not lives:
        return None, "-"
    name, own = max(lives.items(), key=lambda item: item[1][-1].at - item[1][0].at)
    first, last = own[0].at, own[-1].at
    if last - first < 2 * minute:
        return None, f"{name} ({last - first:.0f} s)"
    before = [s.rss for s in own if s.at < first + minute]
    after = [s.rss for s in own if s.at > last - minute]
    return _growth(before, after), f"{name} ({last - first:.0f} s)"


def memory(
    samples: Sequence[RssSample], bursts: Sequence[float], span: float, duration: float
) -> Memory:
    steady, count = steady_growth(samples, bursts, span, duration)
    life, name = longest_life(samples, bursts, span)
    return Memory(warm_growth(samples, duration), steady, count, life, name)
