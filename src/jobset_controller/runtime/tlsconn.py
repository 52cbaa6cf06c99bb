"""Server-side TLS connections whose memory is sized by what the client has sent.

Why not ``loop.connect_accepted_socket(..., ssl=context)``: asyncio's ``SSLProtocol`` gives every
connection a 256 KiB read buffer when it is accepted, and an OpenSSL object whose handshake
buffers (its record buffer, its handshake message buffer) are allocated as soon as the
handshake starts, before the client has sent a byte. Measured with hack/bench/conn_bench.py, a
client that sends a TLS record header and then a byte every 2 s (issue 24's slow client) cost
~260 KiB of RSS per connection, and an idle TLS connection ~280 KiB, against ~12 and ~30 KiB
for Go's crypto/tls, which grows its buffers with what arrives. Two pieces bring ours to ~1 and
~22 KiB (docs/benchmarks.md, "Connections: memory per client"):

- `ClientHellos`, where a TLS connection waits until its first record (the ClientHello) is
  whole: as a bare socket registered for reading, with what it sent kept in a buffer that grows
  only with it. Only then does it get asyncio's transport and its TLS state
  (`RecordSizedSSLProtocol`, with its OpenSSL object), fed those bytes first. A client
  trickling its ClientHello costs its socket and about a hundred bytes of ours. Bytes that
  cannot start a handshake (not a handshake record, an impossible length) are handed over at
  once, so OpenSSL refuses them as it always did. The handshake's time limit counts from the
  accept, not from the hand-over. A client that completes its ClientHello and then stalls
  costs OpenSSL's handshake state until that limit, as on any TLS server: it had to send a real
  ClientHello, and we answer with a key exchange.
- `RecordSizedSSLProtocol`, a subclass of asyncio's ``SSLProtocol`` whose buffers are sized for
  TLS records: socket reads land in a buffer of one record (16 KiB of payload plus what a
  record adds) instead of 256 KiB, one buffer per server rather than per connection; reading
  from the socket pauses once two records wait undecrypted (the stdlib waits for 256 KiB, which
  a client that does not read its answers can pin per connection); writing pauses the
  application at 64 KiB unsent (the stdlib's 512 KiB; 64 KiB is asyncio's own default for
  plain sockets). The stdlib class is not changed: only our servers make these.

Both rely on asyncio's ``sslproto`` as CPython 3.11 to 3.13 write it (``SSLProtocol``'s
constructor, its ``max_size``, the ``_ssl_buffer``/``_ssl_buffer_view`` it reads into, its
application transport's buffer-limit setters, the shutdown steps that a lingering close takes
over), which is not a documented API: tests/unit/runtime/
test_tlsconn.py pins each of them on every interpreter the suite runs on. On an interpreter whose
``SSLProtocol`` has another shape (`shape_problem` says why), the servers take the standard
library's TLS path instead (asyncio's own ``SSLProtocol``, its buffers as they come), with one
warning line: more memory per connection, the same answers.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, Final, cast

import structlog

log = structlog.get_logger("httpserver")

# A TLS record: a 5-byte header (type, version, length), then at most 2^14 bytes of payload in
# plaintext, plus up to 2048 of expansion once protected (RFC 8446 5.2 allows 2^14 + 256 in TLS
# 1.3; RFC 5246 6.2.3 allows 2^14 + 2048 in TLS 1.2, which no AEAD suite comes near).
RECORD_HEADER: Final = 5
MAX_PLAINTEXT: Final = 16 * 1024
RECORD_BUFFER: Final = MAX_PLAINTEXT + 512  # one record read whole, as the issue sizes it
READ_PAUSE_AT: Final = 2 * RECORD_BUFFER
WRITE_PAUSE_AT: Final = 64 * 1024
_HANDSHAKE: Final = 22


class RecordSizedSSLProtocol(sslproto.SSLProtocol):
    """asyncio's server TLS protocol with buffers sized for TLS records (module docstring).

    ``max_size`` is the size of the buffer a socket read lands in, and of the largest piece of
    plaintext handed on at once; one record fits either way. With `read_buffer` (a server's
    buffer of that size, shared by its connections) the connection has no read buffer of its
    own: the stdlib only uses it between reading the socket and copying what was read into
    OpenSSL's input (``get_buffer``, then ``buffer_updated``, in one call of the transport), so
    one buffer serves every connection of an event loop. That takes an idle TLS connection from
    35 to 22 KiB in conn_bench (Go's: 29 KiB).
    """

    max_size = RECORD_BUFFER

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app_protocol: asyncio.BaseProtocol,
        context: ssl.SSLContext,
        waiter: asyncio.Future[None],
        *,
        handshake_timeout: float,
        shutdown_timeout: float,
        read_buffer: memoryview | None = None,
        first_bytes: bytes = b"",
    ) -> None:
        super().__init__(
            loop,
            app_protocol,
            context,
            waiter,
            server_side=True,
            # Seconds, floats as asyncio reads them (typeshed says int).
            ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
            # How long a close waits for the client's close_notify (the stdlib's 30 s would
            # hold a refused or closing connection that long).
            ssl_shutdown_timeout=shutdown_timeout,
        )
        # Through the application's transport, whose setters only record the limits while
        # nothing is buffered (as now, before the connection is made).
        self._app_transport.set_read_buffer_limits(high=READ_PAUSE_AT, low=RECORD_BUFFER // 2)
        self._app_transport.set_write_buffer_limits(high=WRITE_PAUSE_AT, low=WRITE_PAUSE_AT // 4)
        if read_buffer is not None:
            if len(read_buffer) < self.max_size:
                raise ValueError(f"a read buffer of {len(read_buffer)} bytes holds no record")
            self._ssl_buffer = self._ssl_buffer_view = read_buffer
        self._first_bytes = first_bytes

    def _do_shutdown(self) -> None:
        """A lingering close over TLS: our close_notify goes at once, and what the client still
        sends before its own close_notify is read and dropped.

        The stdlib's shutdown hands every record that arrives after our close_notify to
        OpenSSL's ``SSL_shutdown``, which fails on application data
        (APPLICATION_DATA_AFTER_CLOSE_NOTIFY): the connection is then dropped with that data
        unread, and the kernel's reset can discard the answer before the client reads it (a
        refused client still sending its body). ``SSL_read`` still works after our
        close_notify, so the records are read here first and dropped, up to the client's
        close_notify (or the shutdown timeout); then the stdlib completes the shutdown."""
        stdlib: Any = self  # the stdlib's private state, which typeshed does not describe
        if not stdlib._eof_received and stdlib._sslobj is not None:
            try:
                while stdlib._sslobj.read(MAX_PLAINTEXT):
                    pass  # dropped, as a plain connection's lingering close drops it
            except sslproto.SSLAgainErrors:
                pass
            except ssl.SSLZeroReturnError:
                pass  # the client's close_notify: the shutdown below completes
            except ssl.SSLError as error:
                stdlib._on_shutdown_complete(error)
                return
            stdlib._control_ssl_reading()  # read the socket on, even if reading had paused
        cast(Any, super())._do_shutdown()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the handshake, then feed it `first_bytes` (what the client sent before the
        transport existed), as if the transport had just read them."""
        super().connection_made(transport)
        view, self._first_bytes = memoryview(self._first_bytes), b""
        while view and not transport.is_closing():
            buffer = self.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            self.buffer_updated(size)
            view = view[size:]


def _handshake_record_length(header: bytes | bytearray) -> int | None:
    """The payload length a ClientHello's record header announces; None if these 5 bytes
    cannot start a TLS handshake (then OpenSSL, not we, refuses them)."""
    if header[0] != _HANDSHAKE or header[1] != 3:
        return None
    length = int.from_bytes(header[3:5], "big")
    return length if 0 < length <= MAX_PLAINTEXT else None


class _Pending:
    """A TLS client before its ClientHello is whole: its socket, what it sent, its deadline."""

    __slots__ = ("deadline", "received", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.received = bytearray()


class ClientHellos:
    """A server's TLS connections until their first record (the ClientHello) is whole.

    Why bare sockets and not a protocol on asyncio's transport: a transport is a dozen Python
    objects (its attribute dict, an "extra" dict with the peer's and our addresses, a socket
    wrapper, a weak reference in the loop, a bound method of itself that makes it a reference
    cycle), about 2 KiB per connection. Thousands of clients trickling handshakes then leave
    that much of Python's allocator spread over arenas it cannot give back when they are gone
    (measured: 4000 such clients kept ~12 MiB of the controller's RSS after they closed). A
    waiting client is its socket, this registry's small record of it, and one reader
    registration; a periodic sweep, not a timer each, enforces the handshake's time limit.

    `add` takes an accepted socket. Reads land in `read_buffer` (the server's, shared) and are
    kept until the first record is whole; then the connection gets its transport and a
    `RecordSizedSSLProtocol` fed those bytes first, with the rest of `handshake_timeout` (which
    counts from the accept) for the handshake. Bytes that cannot start a handshake go to OpenSSL
    at once, which refuses them as it always did. `app` makes the application's protocol;
    `closed` is called for every connection that ends before its handshake completes.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        app: Callable[[], asyncio.BaseProtocol],
        *,
        handshake_timeout: float,
        shutdown_timeout: float,
        read_buffer: memoryview,
        closed: Callable[[], None],
    ) -> None:
        self._context = context
        self._app = app
        self._timeout = handshake_timeout
        self._shutdown_timeout = shutdown_timeout
        self._buffer = read_buffer
        self._closed = closed
        self._pending: dict[int, _Pending] = {}  # by file descriptor
        self._opening: set[asyncio.Task[None]] = set()
        self._handshaking: dict[RecordSizedSSLProtocol, asyncio.Transport] = {}
        self._sweep: asyncio.TimerHandle | None = None
        # How often the time limit is enforced: its accuracy, at a cost of one pass over the
        # waiting clients per sweep.
        self._sweep_every = min(1.0, handshake_timeout / 4)

    def __len__(self) -> int:
        """Connections not through their handshake: waiting for their hello, or in TLS."""
        return len(self._pending) + len(self._opening) + len(self._handshaking)

    def add(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        fd = sock.fileno()
        self._pending[fd] = _Pending(sock, loop.time() + self._timeout)
        loop.add_reader(fd, self._readable, fd)
        if self._sweep is None:
            self._sweep = loop.call_later(self._sweep_every, self._expire)

    def close(self) -> None:
        """Close every connection not through its handshake (the server stops)."""
        loop = asyncio.get_running_loop()
        for fd in list(self._pending):
            self._drop(loop, fd)
        for task in self._opening:
            task.cancel()
        for transport in list(self._handshaking.values()):
            transport.abort()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def _readable(self, fd: int) -> None:
        pending = self._pending.get(fd)
        if pending is None:
            return
        loop = asyncio.get_running_loop()
        try:
            size = pending.sock.recv_into(self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            size = 0  # reset: gone like an end of file
        if not size:  # the client gave up before its ClientHello
            self._drop(loop, fd)
            return
        pending.received += self._buffer[:size]
        if len(pending.received) < RECORD_HEADER:
            return
        length = _handshake_record_length(pending.received)
        if length is None or len(pending.received) >= RECORD_HEADER + length:
            self._hand_over(loop, fd, pending)

    def _drop(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        pending = self._pending.pop(fd)
        loop.remove_reader(fd)
        pending.sock.close()
        self._closed()

    def _expire(self) -> None:
        """Close the clients whose time ran out; sweep again while any wait."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for fd, pending in list(self._pending.items()):
            if pending.deadline <= now:
                self._drop(loop, fd)
        self._sweep = loop.call_later(self._sweep_every, self._expire) if self._pending else None

    def _hand_over(self, loop: asyncio.AbstractEventLoop, fd: int, pending: _Pending) -> None:
        del self._pending[fd]
        loop.remove_reader(fd)
        remaining = max(pending.deadline - loop.time(), 0.001)
        task = loop.create_task(self._open(pending.sock, bytes(pending.received), remaining))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def _open(self, sock: socket.socket, hello: bytes, remaining: float) -> None:
        """The connection's transport, with TLS fed the hello first (in ``connection_made``,
        before the transport reads anything after it)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        tls = RecordSizedSSLProtocol(
            loop,
            self._app(),
            self._context,
            waiter,
            handshake_timeout=remaining,
            shutdown_timeout=self._shutdown_timeout,
            read_buffer=self._buffer,
            first_bytes=hello,
        )
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: tls, sock)
        except OSError as error:
            sock.close()
            log.debug("connection not opened", error=type(error).__name__)
            self._closed()
            return
        except asyncio.CancelledError:
            sock.close()
            raise
        if waiter.done():  # over already (refused, or closed, while being set up)
            self._handshake_done(tls, waiter)
            return
        assert isinstance(transport, asyncio.Transport)
        self._handshaking[tls] = transport
        waiter.add_done_callback(lambda waiter: self._handshake_done(tls, waiter))

    def _handshake_done(self, tls: RecordSizedSSLProtocol, waiter: asyncio.Future[None]) -> None:
        """The handshake's end, either way. A failed or slow one is that client's problem: a
        debug line, never a traceback (and the waiter's exception is retrieved, so asyncio
        does not log it either)."""
        self._handshaking.pop(tls, None)
        error = None if waiter.cancelled() else waiter.exception()
        if error is not None or waiter.cancelled():
            log.debug("connection not opened", error=type(error).__name__)
            self._closed()


# What RecordSizedSSLProtocol takes from asyncio's SSLProtocol (module docstring).
_CONSTRUCTOR = ("loop", "app_protocol", "sslcontext", "waiter", "server_side")
_METHODS = (
    "get_buffer",
    "buffer_updated",
    "connection_made",
    "_do_shutdown",
    "_on_shutdown_complete",
    "_control_ssl_reading",
)
_INSTANCE = ("_ssl_buffer", "_ssl_buffer_view", "_app_transport", "_sslobj", "_eof_received")


@functools.cache
def shape_problem() -> str | None:
    """Why `RecordSizedSSLProtocol` cannot run on this interpreter (asyncio's private
    ``SSLProtocol`` is not the shape it was written for), or None when it can. Checked once per
    process, on a throwaway instance."""
    stock = sslproto.SSLProtocol
    if not isinstance(getattr(stock, "max_size", None), int):
        return "asyncio.sslproto.SSLProtocol has no integer max_size"
    for method in _METHODS:
        if not callable(getattr(stock, method, None)):
            return f"asyncio.sslproto.SSLProtocol has no {method}()"
    parameters = inspect.signature(stock.__init__).parameters
    for name in (*_CONSTRUCTOR, "ssl_handshake_timeout", "ssl_shutdown_timeout"):
        if name not in parameters:
            return f"asyncio.sslproto.SSLProtocol() takes no {name}"
    loop = asyncio.new_event_loop()
    try:
        probe = RecordSizedSSLProtocol(
            loop,
            asyncio.Protocol(),
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
            loop.create_future(),
            handshake_timeout=1.0,
            shutdown_timeout=1.0,
            read_buffer=memoryview(bytearray(RECORD_BUFFER)),
        )
        for attribute in _INSTANCE:
            if not hasattr(probe, attribute):
                return f"an asyncio.sslproto.SSLProtocol has no {attribute}"
        if len(probe.get_buffer(1)) < 1:
            return "asyncio.sslproto.SSLProtocol.get_buffer() gives no room"
    except Exception as error:  # any other shape: say what broke, serve the stdlib's way
        return f"asyncio.sslproto.SSLProtocol: {type(error).__name__}: {error}"
    finally:
        loop.close()
    return None
