"""A command's standard output, written without letting a reader that stops reading stop the
command.

Why: `print` to a pipe whose reader has stopped (`status --watch | less` paused, a test that
reads nothing) blocks in write(2) with the event loop inside it. Nothing else runs, Ctrl-C
included: the signal is noted, but the loop that would act on it never gets control back until
someone reads. `AwaitedOutput.write` instead waits for the descriptor to take each piece, as an
awaitable that a stop cancels like any other.

Guarantees:
- to a pipe, a socket or a terminal: written in pieces of at most PIPE_BUF bytes, each only once
  the descriptor is writable, which for a pipe means a write of that size cannot block; the
  stream's own buffer is flushed first, so earlier prints stay in order;
- to anything the event loop cannot poll (a regular file, /dev/null, an in-memory stream):
  written and flushed at once, as `print` would;
- a reader that has gone raises BrokenPipeError from `write` (the caller decides what it means).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import select
import stat
from typing import Final, TextIO

PIECE: Final = select.PIPE_BUF  # 4096 on Linux: a pipe that polls writable takes it whole


class AwaitedOutput:
    """Text to `stream`, awaited piece by piece where the stream is a pollable descriptor."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._fd = _pollable_descriptor(stream)

    async def write(self, text: str) -> None:
        fd = self._fd
        if fd is None:
            self.stream.write(text)
            self.stream.flush()
            return
        self.stream.flush()
        data = memoryview(
            text.encode(self.stream.encoding or "utf-8", errors=self.stream.errors or "strict")
        )
        while data:
            if not await self._writable(fd):
                self._fd = None  # not pollable after all (epoll refuses /dev/null): plain writes
                while data:
                    data = data[os.write(fd, data) :]
                return
            try:
                written = os.write(fd, data[:PIECE])
            except BlockingIOError:  # someone made the descriptor non-blocking: wait again
                continue
            data = data[written:]

    @staticmethod
    async def _writable(fd: int) -> bool:
        """Wait until `fd` takes a piece; False if the loop cannot watch it."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        try:
            loop.add_writer(fd, wake)
        except PermissionError:
            return False
        try:
            await ready
        finally:
            loop.remove_writer(fd)
        return True


def _pollable_descriptor(stream: TextIO) -> int | None:
    """The stream's descriptor when it is a pipe, a socket or a character device, else None."""
    with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode):
            return fd
    return None
