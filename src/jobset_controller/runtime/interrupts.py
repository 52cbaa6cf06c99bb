"""Stop signals (SIGINT, SIGTERM) that always reach a command, from its first line to its exit.

Why not asyncio.run's own Ctrl-C handling: asyncio installs it only when SIGINT has Python's
default handler, and Python installs that only when SIGINT was not ignored at exec. A process
started with SIGINT ignored (every background job of a non-interactive shell, e.g. `make test &`,
and every process such a job starts) therefore never reacted to it: `status --watch` sent SIGINT
kept refreshing for ever. Go's `signal.Notify`, which kubectl and upstream's manager use, takes
the signal whatever its inherited disposition; `StopSignals` does the same.

Why it is installed before anything else: the installed commands (jobset_controller.console)
take the signals before they import the rest. A signal that lands while a command starts is
recorded; once the command has said how an interruption ends it (`exit_with`), a signal before
its event loop runs ends it at once with that code (there is nothing to clean up yet: no
connection, no child, no write), instead of a KeyboardInterrupt traceback or a death half-way,
and instead of finishing a start-up that a loaded machine makes slow. From the loop on, the
command's own stop path runs (`attach`). What is left is the interpreter's own start, before any
of our code runs: a signal there ends the process as it ends any program (by the signal).

Why that exit is `os._exit` after flushing stdout and stderr, not a SystemExit raised from the
handler: a Python signal handler runs at whatever bytecode the main thread is at, and an
exception raised there can land inside an extension module's initialisation. Raised inside
orjson's (imported when the agent first connects), it crashed the interpreter with SIGSEGV: 4 of
150 agents sent SIGINT at random points of their start. Nothing before the loop needs unwinding.

Guarantees:
- `install()` (main thread) takes SIGINT and SIGTERM at once, ignored at exec or not; the first
  one received is kept in `received`.
- `exit_with(code)`: a signal received already raises SystemExit(code(signum)) from exit_with;
  from then until `attach`, a signal ends the process at once with that code (`exit_now`: stdout
  and stderr flushed, then `os._exit`).
- `attach(on_stop)` (inside the running loop) hands every later signal to `on_stop(signum)` from
  the loop, and calls it once, soon, for a signal received before it.
- `run(main)` runs a tool's coroutine: a stop signal cancels it and the command returns the
  code given to `exit_with` (128 + n when none was); any other outcome is main's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, Final, NoReturn

# asyncio is imported where it is used: the installed commands take the signals before they
# import anything heavy (jobset_controller.console), and this module is the first they import.

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


def by_signal(signum: int) -> int:
    """The shell's exit status of a process ended by signal `signum`: 128 + n."""
    return 128 + signum


def exit_now(code: int) -> NoReturn:
    """End the process with `code` from a signal handler (module docstring: why not SystemExit).
    What the command printed is flushed first; a stream the signal interrupted mid-write (a
    reentrant flush) or already closed keeps what it had."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            stream.flush()
    os._exit(code)


class StopSignals:
    """SIGINT and SIGTERM for one command (module docstring)."""

    def __init__(
        self,
        signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
        *,
        end: Callable[[int], NoReturn] = exit_now,
    ) -> None:
        self.signals = signals
        self._end = end
        self.received: int | None = None
        self._exit: Callable[[int], int] | None = None
        self._on_stop: Callable[[int], None] | None = None
        self._attached = False
        self._installed = False

    def install(self) -> StopSignals:
        """Take the signals now (main thread, before any loop): each is recorded until the
        command says what an interruption means (`exit_with`, `attach`)."""
        for signum in self.signals:
            signal.signal(signum, self._record)
        self._installed = True
        return self

    def exit_with(self, code: int | Callable[[int], int]) -> None:
        """An interruption ends this command with `code` (or `code(signum)`): at once while no
        loop runs (raising SystemExit here if a signal came already), and as `run`'s result."""
        self._exit = code if callable(code) else (lambda _signum: code)
        if self.received is not None and not self._attached:
            raise SystemExit(self._exit(self.received))

    def attach(self, on_stop: Callable[[int], None]) -> None:
        """From the running loop on, hand each signal to `on_stop`; one received earlier is
        handed over at the loop's next turn."""
        import asyncio

        loop = asyncio.get_running_loop()
        self._on_stop = on_stop
        self._attached = True
        for signum in self.signals:
            loop.add_signal_handler(signum, self._deliver, signum)
        if self.received is not None:
            loop.call_soon(on_stop, self.received)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.received is None:
            self.received = signum
        if self._exit is not None and not self._attached:
            self._end(self._exit(signum))

    def _deliver(self, signum: int) -> None:
        if self.received is None:
            self.received = signum
        if self._on_stop is not None:
            self._on_stop(signum)

    def run(self, main: Callable[[], Coroutine[Any, Any, int]]) -> int:
        """Run `main()` in a new event loop; a stop signal (before or during it) cancels it and
        the result is the interruption's code (`exit_with`)."""
        import asyncio

        async def guarded() -> int:
            task = asyncio.current_task()
            assert task is not None

            def cancel(_signum: int) -> None:
                task.cancel()

            self.attach(cancel)
            try:
                return await main()
            except asyncio.CancelledError:
                if self.received is None:
                    raise
                return (self._exit or by_signal)(self.received)

        try:
            return asyncio.run(guarded())
        finally:
            # The closed loop put the default actions back; a signal while the process exits
            # is recorded, not a KeyboardInterrupt traceback from the interpreter's shutdown.
            if self._installed:
                self.install()
