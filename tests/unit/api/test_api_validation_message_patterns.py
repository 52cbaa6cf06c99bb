r"""CREATE validation of ``onJobFailureMessagePatterns``: exactly what Go's ``regexp`` accepts.

Python-only syntax (lookaround, backreferences, ``\Z``) is rejected with the pattern's field path;
RE2 syntax Python lacks (``\pL``, ``\z``) is accepted; the few things RE2 accepts and Go refuses
are refused too.
"""

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jobset_controller.api import FeatureGates, JobSet, validate_create
from jobset_controller.api.message_patterns import (
    MAX_CACHED_PATTERNS,
    pattern_error,
    pattern_finds_match,
)

Path = tuple[str | int, ...]
Patch = Mapping[Path, Any]


def patterns_patch(*patterns: str) -> Patch:
    rule = {"action": "FailJobSet", "onJobFailureMessagePatterns": list(patterns)}
    return {("spec", "failurePolicy"): {"rules": [{"action": "FailJobSet"}, rule]}}


def errors_for(admitted: Callable[[Patch], JobSet], *patterns: str) -> list[tuple[str, str, str]]:
    errors = validate_create(admitted(patterns_patch(*patterns)), features=FeatureGates())
    return [(error.field, error.type, error.message) for error in errors]


@pytest.mark.parametrize(
    ("pattern", "detail"),
    [
        pytest.param("(?=x)", "invalid perl operator: (?=", id="lookahead"),
        pytest.param("(?<!x)y", "invalid perl operator: (?<!", id="lookbehind"),
        pytest.param(r"(a)\1", r"invalid escape sequence: \1", id="backreference"),
        pytest.param(r"end\Z", r"invalid escape sequence: \Z", id="python end of text"),
        pytest.param("exit (code", "missing ): exit (code", id="unbalanced parenthesis"),
        pytest.param("a**", "bad repetition operator: **", id="nested repetition"),
        pytest.param("a{1001}", "invalid repetition size: {1001}", id="repeat count over 1000"),
        pytest.param(r"\C", r"invalid escape sequence: \C", id="any byte, refused by Go"),
        pytest.param("(?P<é>x)", "invalid named capture group: é", id="non-ASCII group name"),
        pytest.param(
            "(?P<a>x)|(?<a>y)", "duplicate capture group name: a", id="repeated group name"
        ),
    ],
)
def test_pattern_go_refuses_is_rejected_with_its_field_path(
    admitted: Callable[[Patch], JobSet], pattern: str, detail: str
) -> None:
    errors = errors_for(admitted, "exit code [0-9]+", pattern)
    assert len(errors) == 1, errors
    field, error_type, message = errors[0]
    assert field == "spec.failurePolicy.rules[1].onJobFailureMessagePatterns[1]"
    assert error_type == "Invalid"
    assert message.startswith("invalid job failure message pattern in failure policy")
    assert message.endswith(detail)


def test_each_invalid_pattern_gets_its_own_error(admitted: Callable[[Patch], JobSet]) -> None:
    fields = [field for field, _, _ in errors_for(admitted, "(?=a)", "ok", r"(b)\1")]
    assert fields == [
        "spec.failurePolicy.rules[1].onJobFailureMessagePatterns[0]",
        "spec.failurePolicy.rules[1].onJobFailureMessagePatterns[2]",
    ]


def test_error_renders_the_pattern_as_the_bad_value(admitted: Callable[[Patch], JobSet]) -> None:
    errors = validate_create(admitted(patterns_patch("(?=x)")), features=FeatureGates())
    assert str(errors[0]).startswith(
        'spec.failurePolicy.rules[1].onJobFailureMessagePatterns[0]: Invalid value: "(?=x)": '
    )


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param(r"\pL+", id="one-letter unicode class"),
        pytest.param(r"\p{Greek}", id="named unicode class"),
        pytest.param("(?P<name>x)", id="python-style named group"),
        pytest.param("(?<name>x)", id="go 1.22 named group"),
        pytest.param(r"limit\z", id="end of text"),
        pytest.param("[[:alpha:]]+", id="POSIX class"),
        pytest.param(r"\Q(?=\C\E", id="quoted text is literal"),
        pytest.param(r"[\\C]", id="escaped backslash before C"),
        pytest.param("[(?P<a>]x(?P<a>y)", id="group opener inside a class"),
        pytest.param("(?i)backoff limit", id="flags"),
        pytest.param("", id="empty pattern"),
        pytest.param(r"^(\w+\s?)*\d$", id="catastrophic for backtracking, fine for RE2"),
    ],
)
def test_pattern_go_accepts_is_valid(admitted: Callable[[Patch], JobSet], pattern: str) -> None:
    assert errors_for(admitted, pattern) == []


def test_a_rejected_pattern_never_matches_and_is_not_handed_to_python_re() -> None:
    # Python's re would match these; a fallback to it would show up here.
    assert pattern_error("x(?=y)") is not None
    assert not pattern_finds_match("x(?=y)", "xy")
    assert not pattern_finds_match(r"(a)\1", "aa")
    assert not pattern_finds_match(r"a\Z", "a")


def test_invalid_patterns_are_cached_like_valid_ones() -> None:
    # More distinct patterns than the cache holds: each still gets its own answer.
    count = MAX_CACHED_PATTERNS + 5
    assert all(pattern_error(f"(?={index})") for index in range(count))
    assert all(pattern_finds_match(f"^{index}$", str(index)) for index in range(count))
