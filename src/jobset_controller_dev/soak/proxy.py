"""A TCP forwarder standing in for the webhook Service in front of the controller's replicas.

Why: the API server calls the webhooks by URL, and a URL names one port, while the soak kills and
restarts replicas. A Service's endpoints are every ready replica; this forwarder is the same on
loopback: each connection goes to the first replica (in turn) that accepts it, bytes copied both
ways unchanged (TLS ends at the replica, which serves the pair the webhook configurations trust).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable


class Forwarder:
    """Listens on 127.0.0.1:`port` (after `start`) and forwards to `targets()` ports."""

    def __init__(self, targets: Callable[[], list[int]]) -> None:
        self._targets = targets
        self._turn = itertools.count()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.refused = 0  # connections no replica accepted

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        ports = self._targets()
        if not ports:
            return None
        first = next(self._turn) % len(ports)
        for port in ports[first:] + ports[:first]:
            try:
                return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
            except (OSError, TimeoutError):
                continue
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:
            self.refused += 1
            writer.close()
            return
        up_reader, up_writer = upstream
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            # The soak's loop is ending with this connection open: close both sides and end
            # quietly (asyncio logs a connection handler that ends cancelled as an error).
            writer.close()
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
