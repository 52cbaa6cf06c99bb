"""Waiting in tests: `scaled` (every wait's length), and the one way to poll a check until it
holds: `eventually` on an event loop, `poll` in a plain thread. Every tier uses them.

Why one knob: a slow or busy machine needs longer waits, and a wait that is too short there is
not a bug of the product. `JOBSET_TEST_TIMEOUT_SCALE` (a positive number, default 1) multiplies
every wait of the suite that goes through `scaled`, and `eventually` scales its own `within`.
Bounds that pin the product's timing (a takeover within the Lease's duration, an exit within
2 s of SIGINT) are measured in wall time on the same machine, so they are scaled too.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

T = TypeVar("T")

SCALE_VARIABLE = "JOBSET_TEST_TIMEOUT_SCALE"


def timeout_scale() -> float:
    """`JOBSET_TEST_TIMEOUT_SCALE` as a number (default 1); anything else stops the suite."""
    text = os.environ.get(SCALE_VARIABLE, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{SCALE_VARIABLE}={text!r}: not a number") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{SCALE_VARIABLE}={text!r}: must be a positive number")
    return value


def scaled(seconds: float) -> float:
    """`seconds` times the suite's timeout scale: the length of a wait in a test."""
    return seconds * timeout_scale()


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    what: str,
    within: float,
    *,
    interval: float = 0.1,
    tolerate: tuple[type[BaseException], ...] = (),
    state: Callable[[], Awaitable[str]] | Callable[[], str] | None = None,
) -> float:
    """Call ``check`` (sync or async) every ``interval`` s until it returns true; return the
    seconds it took. Exceptions of the ``tolerate`` types count as "not yet". Past ``within`` s
    (scaled: `scaled`) raise AssertionError naming ``what`` and the last thing seen: the
    check's last falsy result when it was not a plain False, or the last tolerated error, and
    ``state()`` when given (what the test knows of the state it waits on)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    limit = scaled(within)
    last = ""
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return loop.time() - started
            last = "" if result is False or result is None else f"last result: {result!r}"
        except tolerate as error:
            last = f"last error: {type(error).__name__}: {error}"
        if loop.time() - started > limit:
            seen = [part for part in (last, await _describe(state)) if part]
            detail = "; ".join(seen)
            raise AssertionError(
                f"{what}: not reached within {limit:g} s" + (f" ({detail})" if detail else "")
            )
        await asyncio.sleep(interval)


def poll(
    check: Callable[[], T | Literal[False] | None],
    what: str,
    within: float,
    *,
    interval: float = 0.2,
    state: Callable[[], str] | None = None,
) -> T:
    """`eventually` for code that runs no event loop: call ``check`` every ``interval`` s until
    its result is truthy, and return that result. Past ``within`` s (scaled: `scaled`) raise
    AssertionError naming ``what``, the check's last falsy result when it was not a plain
    False, and ``state()`` when given (what the test knows of the state it waits on)."""
    started = time.monotonic()
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() - started > scaled(within):
            last = "" if result is False or result is None else f"last result: {result!r}"
            seen = [part for part in (last, _describe_now(state)) if part]
            detail = "; ".join(seen)
            raise AssertionError(
                f"{what}: not reached within {scaled(within):g} s"
                + (f" ({detail})" if detail else "")
            )
        time.sleep(interval)  # the poll's interval, not synchronisation


def _describe_now(state: Callable[[], str] | None) -> str:
    if state is None:
        return ""
    try:
        return f"state: {state()}"
    except Exception as error:
        return f"state unavailable: {type(error).__name__}: {error}"


async def _describe(state: Callable[[], Awaitable[str]] | Callable[[], str] | None) -> str:
    """``state()``'s text, or why it could not be had (the wait has failed already)."""
    if state is None:
        return ""
    try:
        text = state()
        if inspect.isawaitable(text):
            text = await text
        return f"state: {text}"
    except Exception as error:
        return f"state unavailable: {type(error).__name__}: {error}"
