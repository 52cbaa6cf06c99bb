"""`eventually`: poll a check until it holds, for integration and e2e tests alike."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    what: str,
    within: float,
    *,
    interval: float = 0.1,
    tolerate: tuple[type[BaseException], ...] = (),
) -> float:
    """Call ``check`` (sync or async) every ``interval`` s until it returns true; return the
    seconds it took. Exceptions of the ``tolerate`` types count as "not yet". Past ``within`` s
    raise AssertionError naming ``what``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return loop.time() - started
        except tolerate:
            pass
        if loop.time() - started > within:
            raise AssertionError(f"{what}: not reached within {within:g} s")
        await asyncio.sleep(interval)
