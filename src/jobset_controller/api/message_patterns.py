r"""Failure-message patterns (``onJobFailureMessagePatterns``): Go's syntax, linear-time matching.

Why RE2 and not Python's ``re``: upstream matches these patterns with Go's ``regexp`` package,
which is RE2. A backtracking engine both accepts another language (lookaround, backreferences)
and can spend minutes on an ordinary message: ``^(\w+\s?)*\d$`` against "Job has reached the
specified backoff limit" backtracks exponentially, and it would do so on the event loop that
serves every JobSet. RE2 matches in time linear in the message, so no pattern can stall it.

RE2 and Go's parser agree on syntax except for three things RE2 accepts and Go rejects; they
are rejected here too, so validation and matching accept exactly what upstream accepts:
``\C`` (one byte, which would split UTF-8 characters), capture group names that are not ASCII
letters, digits and ``_``, and a capture group name used twice.

Compiling costs far more than matching a short message, and the same few patterns are looked
at on every pass that sees a failed Job, so compiled patterns (and the errors of invalid ones)
are kept in a small LRU cache. The cache is the only state here; it never changes a result.

The ``google-re2`` binding has no type information; this module is the one place that touches
it, behind typed functions. That binding never falls back to Python's ``re``: a pattern RE2
cannot parse raises ``re2.error``.
"""

import functools
from dataclasses import dataclass
from typing import Final, Protocol, cast

import re2  # type: ignore[import-untyped]

# Distinct patterns kept compiled. Each compiled pattern is small (RE2's default memory budget of
# 8 MiB per pattern bounds the worst case); a cluster rarely has more than a handful of patterns.
MAX_CACHED_PATTERNS: Final = 128

_ANY_BYTE_ESCAPE: Final = "\\C"
_QUOTE_START: Final = "\\Q"
_QUOTE_END: Final = "\\E"
_NAMED_GROUP_OPENERS: Final = ("(?P<", "(?<")
_NAME_CHARACTERS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
)


class _Regexp(Protocol):
    def search(self, text: bytes) -> object | None: ...


@dataclass(frozen=True)
class _Compiled:
    regexp: _Regexp | None
    error: str | None


def pattern_error(pattern: str) -> str | None:
    """Why Go's ``regexp`` would refuse ``pattern`` (RE2's own wording), or None if it compiles."""
    return _compile(pattern).error


def pattern_finds_match(pattern: str, text: str) -> bool:
    """``pattern`` matches somewhere in ``text``, as Go's ``regexp.MatchString`` (unanchored).

    A pattern that does not compile matches nothing.
    """
    regexp = _compile(pattern).regexp
    return regexp is not None and regexp.search(_utf8(text)) is not None


@functools.lru_cache(maxsize=MAX_CACHED_PATTERNS)
def _compile(pattern: str) -> _Compiled:
    options = re2.Options()
    # An invalid pattern is the caller's to report; RE2 would also log it to stderr.
    options.log_errors = False
    try:
        regexp = cast(_Regexp, re2.compile(_utf8(pattern), options))
    except re2.error as error:
        return _Compiled(None, _error_text(error))
    go_error = _go_only_error(pattern)
    if go_error is not None:
        return _Compiled(None, go_error)
    return _Compiled(regexp, None)


def _error_text(error: Exception) -> str:
    detail = error.args[0] if error.args else ""
    if isinstance(detail, bytes):
        return detail.decode("utf-8", "replace")
    return str(detail)


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate becomes U+FFFD, as Go's JSON decoding makes it."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text).encode()


def _go_only_error(pattern: str) -> str | None:
    """What Go rejects in a pattern RE2 has accepted: ``\\C`` and bad or repeated group names.

    RE2 has already parsed the pattern, so the structure is sound; this walk only has to know
    escapes, ``\\Q...\\E`` literal text and character classes, where ``(?P<`` is not a group.
    """
    names: set[str] = set()
    index, in_class = 0, False
    while index < len(pattern):
        if pattern.startswith(_QUOTE_START, index) and not in_class:
            end = pattern.find(_QUOTE_END, index + len(_QUOTE_START))
            if end < 0:
                return None
            index = end + len(_QUOTE_END)
        elif pattern[index] == "\\":
            if pattern.startswith(_ANY_BYTE_ESCAPE, index):
                return f"invalid escape sequence: {_ANY_BYTE_ESCAPE}"
            index += 2
        elif in_class:
            index, in_class = _class_step(pattern, index)
        elif pattern[index] == "[":
            index = _class_body_start(pattern, index + 1)
            in_class = True
        else:
            name = _group_name_at(pattern, index)
            if name is None:
                index += 1
                continue
            if not name or not set(name) <= _NAME_CHARACTERS:
                return f"invalid named capture group: {name}"
            if name in names:
                return f"duplicate capture group name: {name}"
            names.add(name)
            index = pattern.index(">", index) + 1
    return None


def _class_body_start(pattern: str, index: int) -> int:
    """Past ``^`` and a leading ``]``, which is a literal ``]`` rather than the class's end."""
    if pattern.startswith("^", index):
        index += 1
    if pattern.startswith("]", index):
        index += 1
    return index


def _class_step(pattern: str, index: int) -> tuple[int, bool]:
    """One step inside a character class: a ``[:name:]`` class, its closing ``]``, or a char."""
    if pattern.startswith("[:", index):
        end = pattern.find(":]", index + 2)
        if end >= 0:
            return end + 2, True
    return index + 1, pattern[index] != "]"


def _group_name_at(pattern: str, index: int) -> str | None:
    for opener in _NAMED_GROUP_OPENERS:
        if pattern.startswith(opener, index):
            start = index + len(opener)
            end = pattern.find(">", start)
            return pattern[start:end] if end >= 0 else None
    return None
