"""hack/bench/rounds.py: a bench's figures over several rounds, each the median of its rounds."""

from __future__ import annotations

from dataclasses import dataclass

from tests.unit.tooling.hack_scripts import load_script

rounds = load_script("rounds", "bench")


@dataclass
class Figures:
    p99_ms: float
    errors: int
    reviews: int
    window_s: float | None = None


def test_each_figure_is_the_median_of_the_rounds_so_one_rounds_stall_does_not_decide_it() -> None:
    runs = [
        {"a": Figures(p99_ms=2.6, errors=0, reviews=500)},
        {"a": Figures(p99_ms=7.3, errors=0, reviews=498)},
        {"a": Figures(p99_ms=3.1, errors=0, reviews=501)},
    ]
    assert rounds.median_of_rounds(runs)["a"] == Figures(p99_ms=3.1, errors=0, reviews=500)


def test_summed_fields_add_up_so_an_error_in_one_round_is_not_hidden() -> None:
    runs = [
        {"a": Figures(p99_ms=1.0, errors=0, reviews=10)},
        {"a": Figures(p99_ms=1.0, errors=2, reviews=10)},
        {"a": Figures(p99_ms=1.0, errors=0, reviews=10)},
    ]
    assert rounds.median_of_rounds(runs, summed=("errors",))["a"].errors == 2
    assert rounds.median_of_rounds(runs)["a"].errors == 0  # what a median alone would say


def test_a_figure_only_some_rounds_have_is_the_median_of_those_and_none_when_no_round_has_it() -> (
    None
):
    runs = [
        {"busy": Figures(1.0, 0, 10, window_s=1.5), "idle": Figures(1.0, 0, 10)},
        {"busy": Figures(1.0, 0, 10, window_s=None), "idle": Figures(1.0, 0, 10)},
        {"busy": Figures(1.0, 0, 10, window_s=2.5), "idle": Figures(1.0, 0, 10)},
    ]
    combined = rounds.median_of_rounds(runs)
    assert combined["busy"].window_s == 2.0
    assert combined["idle"].window_s is None


def test_a_cell_missing_from_a_round_is_the_median_of_the_rounds_that_measured_it() -> None:
    runs = [{"a": Figures(2.0, 0, 10), "b": Figures(9.0, 0, 10)}, {"a": Figures(4.0, 0, 10)}]
    combined = rounds.median_of_rounds(runs)
    assert list(combined) == ["a", "b"]
    assert combined["a"].p99_ms == 3.0
    assert combined["b"].p99_ms == 9.0


def test_the_spread_is_the_lowest_and_highest_and_none_with_fewer_than_two_rounds() -> None:
    runs = [{"a": Figures(2.6, 0, 1)}, {"a": Figures(7.3, 0, 1)}, {"a": Figures(3.1, 0, 1)}]
    assert rounds.spread(runs, "a", "p99_ms") == (2.6, 7.3)
    assert rounds.spread(runs[:1], "a", "p99_ms") is None
    assert rounds.spread(runs, "missing", "p99_ms") is None


def test_the_sides_take_turns_first_so_a_drift_of_the_machine_favours_neither() -> None:
    assert rounds.side_order(["upstream", "ours"], 0) == ["upstream", "ours"]
    assert rounds.side_order(["upstream", "ours"], 1) == ["ours", "upstream"]
    assert rounds.side_order(["upstream", "ours"], 2) == ["upstream", "ours"]
