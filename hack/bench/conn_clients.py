"""conn_bench.py's client process: holds many connections of one kind to a server, on command.

Why a process of its own: thousands of sockets, their handshakes and a byte every 2 s each are
work for an event loop; in the bench's own process they would delay the AdmissionReviews whose
latency the bench measures, and their memory would be mixed with nothing we read, but their CPU
would be. Commands, one per line on stdin, each answered by one line on stdout:

    open KIND COUNT PORT   -> "opened COUNT"   KIND: idle-plain, idle-tls, slow-tls, hello-tls
    close                  -> "closed RECONNECTS"  (all connections closed; how many slow ones
                                                    the server closed and we opened again)

- idle-plain: a TCP connection that sends `GET /healthz` once, reads the answer, and stays open
  (keep-alive), as a kubelet or Prometheus would between two requests.
- idle-tls: a TLS connection (full handshake) that POSTs one AdmissionReview (the body comes from
  the file named on the command line), reads the answer, and stays open, as the API server's
  pooled connection to a webhook does between two reviews.
- slow-tls: a TCP connection that sends a TLS record header announcing a 512-byte ClientHello,
  then one byte of it every 2 s (issue 24's slow client). A server closes it when its handshake
  timeout passes; it is then opened again at once, so COUNT stay open until `close`.
- hello-tls: a whole ClientHello (a real one, from Python's ssl), then nothing: the server has
  answered with its key exchange and waits for the client's next flight until its handshake
  timeout. Reopened like slow-tls.

    python conn_clients.py REVIEW_FILE
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import sys
from pathlib import Path

# A handshake record (22), legacy version TLS 1.0, 512 bytes long; then a ClientHello's first
# bytes (type 1, length 508, version TLS 1.2), then zeros.
RECORD_HEADER = b"\x16\x03\x01\x02\x00"
HELLO_PREFIX = b"\x01\x00\x01\xfc\x03\x03"
TRICKLE_EVERY = 2.0
OPENING_AT_ONCE = 100


class Held(asyncio.Protocol):
    """One connection: writes `first`, optionally waits for one HTTP answer, then holds."""

    def __init__(self, first: bytes, answered: asyncio.Future[None] | None) -> None:
        self.first, self.answered = first, answered
        self.transport: asyncio.Transport | None = None
        self.received = bytearray()
        self.sent = 0
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.first)

    def data_received(self, data: bytes) -> None:
        if self.answered is None or self.answered.done():
            return
        self.received += data
        head, found, body = bytes(self.received).partition(b"\r\n\r\n")
        if not found:
            return
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(body) >= length:
            self.received = bytearray()
            if not head.startswith(b"HTTP/1.1 200"):
                self.answered.set_exception(RuntimeError(head.split(b"\r\n")[0].decode()))
            else:
                self.answered.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_exception(ConnectionError("closed before the answer"))
        if not self.lost.done():
            self.lost.set_result(None)


@functools.cache
def client_hello() -> bytes:
    """A real ClientHello's bytes (TLS 1.2 and 1.3 offered, no verification), made once: a
    context loads the system's CA store (tens of ms), too slow to make one per connection."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outgoing = ssl.MemoryBIO()
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


class Clients:
    def __init__(self, review: bytes) -> None:
        self.review = review
        self.held: list[Held] = []
        self.holding = False
        self.reconnects = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.tls = ssl.create_default_context()
        self.tls.check_hostname = False
        self.tls.verify_mode = ssl.CERT_NONE
        self.tls.set_alpn_protocols(["http/1.1"])

    def request(self, kind: str) -> bytes:
        if kind == "idle-plain":
            return b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n"
        return (
            b"POST /validate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s HTTP/1.1\r\n"
            b"Host: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(self.review)).encode() + b"\r\n\r\n" + self.review
        )

    async def open_one(self, kind: str, port: int, gate: asyncio.Semaphore) -> None:
        loop = asyncio.get_running_loop()
        async with gate:
            if kind in ("slow-tls", "hello-tls"):
                first = RECORD_HEADER if kind == "slow-tls" else client_hello()
                _, held = await loop.create_connection(lambda: Held(first, None), "127.0.0.1", port)
                self.held.append(held)
                self._follow(held, kind, port)
                return
            answered: asyncio.Future[None] = loop.create_future()
            _, held = await loop.create_connection(
                lambda: Held(self.request(kind), answered),
                "127.0.0.1",
                port,
                ssl=self.tls if kind == "idle-tls" else None,
            )
            self.held.append(held)
            await answered

    def _follow(self, held: Held, kind: str, port: int) -> None:
        """Open a held connection again when the server closes it, while we hold."""

        async def again() -> None:
            await held.lost
            if self.holding:
                self.reconnects += 1
                self.held.remove(held)
                with contextlib.suppress(OSError):  # the server went away: stop
                    await self.open_one(kind, port, asyncio.Semaphore(1))

        task = asyncio.get_running_loop().create_task(again())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def trickle(self) -> None:
        """A byte of the ClientHello every 2 s on every slow connection."""
        while True:
            await asyncio.sleep(TRICKLE_EVERY)
            for held in self.held:
                if held.first is RECORD_HEADER and held.transport is not None:
                    byte = HELLO_PREFIX[held.sent : held.sent + 1] or b"\x00"
                    held.sent += 1
                    if not held.transport.is_closing():
                        held.transport.write(byte)

    async def open(self, kind: str, count: int, port: int) -> None:
        self.holding = True
        gate = asyncio.Semaphore(OPENING_AT_ONCE)
        await asyncio.gather(*(self.open_one(kind, port, gate) for _ in range(count)))

    async def close(self) -> int:
        self.holding = False
        for held in self.held:
            if held.transport is not None:
                held.transport.abort()
        await asyncio.gather(*(held.lost for held in self.held), return_exceptions=True)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.held.clear()
        reconnects, self.reconnects = self.reconnects, 0
        return reconnects


async def main(review: bytes) -> None:
    clients = Clients(review)
    trickle = asyncio.create_task(clients.trickle())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().split():
        if line[0] == "open":
            kind, count, port = line[1], int(line[2]), int(line[3])
            await clients.open(kind, count, port)
            print(f"opened {count}", flush=True)
        elif line[0] == "close":
            print(f"closed {await clients.close()}", flush=True)
    trickle.cancel()


if __name__ == "__main__":
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main(Path(sys.argv[1]).read_bytes()))
