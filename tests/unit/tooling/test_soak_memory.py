"""The soak's RSS growth figure: what it compares, and what it leaves out (a burst's processes)."""

from __future__ import annotations

import pytest

from jobset_controller_dev.soak import report
from jobset_controller_dev.soak.memory import (
    RssSample,
    longest_life,
    memory,
    steady_growth,
    touched_by_burst,
    warm_growth,
)

MIB = 2**20


def life(name: str, born: float, start: float, end: float, rss_mib: float) -> list[RssSample]:
    """A process sampled every 5 s from `start` to `end` at a flat RSS."""
    return [
        RssSample(float(t), name, born, int(rss_mib * MIB)) for t in range(int(start), int(end), 5)
    ]


def test_a_process_alive_during_a_bursts_window_is_touched_and_one_born_after_it_is_not() -> None:
    bursts, span = [1000.0], 300.0
    assert touched_by_burst(RssSample(1100, "a#1", 900, MIB), bursts, span)  # alive at the burst
    assert touched_by_burst(RssSample(1500, "b#1", 1200, MIB), bursts, span)  # born inside it
    assert not touched_by_burst(RssSample(1500, "c#1", 1301, MIB), bursts, span)  # born after
    assert not touched_by_burst(RssSample(990, "d#1", 900, MIB), bursts, span)  # before it


def test_a_bursts_leader_in_the_last_tenth_raises_the_warm_figure_but_not_the_steady_one() -> None:
    duration, span = 3600.0, 300.0
    samples = [
        *life("ours-0#5", 1740, 1800, 2200, 80),
        *life("ours-1#6", 2200, 2260, 3100, 80),
        *life("ours-0#7", 3100, 3160, 3600, 90),  # led through the burst at 3200
    ]
    bursts = [3200.0]
    assert warm_growth(samples, duration) == pytest.approx(0.125)
    growth, count = steady_growth(samples, bursts, span, duration)
    assert growth == pytest.approx(0.0)
    # its samples before the burst are steady: a process is judged by its life up to each one
    assert count == len([s for s in samples if s.life != "ours-0#7" or s.at < 3200])


def test_steady_growth_finds_a_controller_whose_every_new_leader_is_larger() -> None:
    duration = 3600.0
    samples = [
        *life("ours-0#5", 1740, 1800, 2400, 80),
        *life("ours-1#6", 2400, 2460, 3000, 84),
        *life("ours-0#7", 3000, 3060, 3600, 88),
    ]
    growth, _ = steady_growth(samples, [], 300.0, duration)
    assert growth == pytest.approx(0.1)


def test_steady_growth_is_none_with_fewer_than_five_steady_samples() -> None:
    samples = life("ours-0#1", 1700, 1800, 1820, 80)
    assert steady_growth(samples, [], 300.0, 3600.0) == (None, 4)


def test_the_longest_steady_life_reports_its_own_growth_from_its_first_minute_to_its_last() -> None:
    growing = [
        RssSample(float(t), "ours-1#2", 0, (80 + (t - 100) // 100) * MIB)
        for t in range(100, 700, 5)
    ]
    short = life("ours-0#3", 700, 760, 900, 70)
    growth, name = longest_life([*growing, *short], [], 300.0)
    assert name == "ours-1#2 (595 s)"
    assert growth == pytest.approx(5 / 80)


def test_a_life_shorter_than_two_minutes_gives_no_life_growth() -> None:
    assert longest_life(life("ours-0#1", 0, 60, 150, 80), [], 300.0) == (None, "ours-0#1 (85 s)")


def test_the_table_prints_the_steady_warm_and_life_figures_and_a_dash_for_older_runs() -> None:
    found = memory(life("ours-0#1", 1700, 1800, 3600, 80), [], 300.0, 3600.0)
    row = dict((label.strip(), cell) for label, cell in report.ROWS)
    figures = {
        "rss_growth_second_half": found.steady_growth,
        "rss_growth_warm": found.warm_growth,
        "rss_life_growth": found.life_growth,
        "rss_life": found.life,
    }
    assert row["leader RSS growth, second half, no burst"](figures) == "+0.0%"
    assert row["the same, every warm sample"](figures) == "+0.0%"
    assert row["the longest steady life's own"](figures) == "+0.0% ours-0#1 (1795 s)"
    assert row["the longest steady life's own"]({}) == "-"
    assert row["the same, every warm sample"]({}) == "-"
