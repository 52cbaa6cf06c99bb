"""Server-side TLS connections whose memory is sized by what the client has sent.

Why not ``loop.connect_accepted_socket(..., ssl=context)``: asyncio's ``SSLProtocol`` gives every
connection a 256 KiB read buffer when it is accepted, and an OpenSSL object whose handshake
buffers (its record buffer, its handshake message buffer) are allocated as soon as the
handshake starts, before the client has sent a byte. Measured with hack/bench/conn_bench.py, a
client that sends a TLS record header and then a byte every 2 s (issue 24's slow client) cost
~260 KiB of RSS per connection, and an idle TLS connection ~280 KiB, against ~11 and ~29 KiB
for Go's crypto/tls, which grows its buffers with what arrives. Two pieces bring ours to ~2 and
~22 KiB:

- `FirstRecord`, the protocol a TLS connection starts with: it keeps what the client sends, in
  a buffer that grows only with it, until the first TLS record (the ClientHello) is whole, and
  only then makes the TLS state (`RecordSizedSSLProtocol`, with its OpenSSL object) and hands it
  the connection and those bytes. A client trickling its ClientHello costs the socket, the
  transport, this object and its few bytes. Bytes that cannot start a handshake (not a
  handshake record, an impossible length) are handed over at once, so OpenSSL refuses them as
  it always did. The handshake's time limit counts from the accept, not from the hand-over. A
  client that completes its ClientHello and then stalls costs OpenSSL's handshake state (some
  50 KiB) until that limit, as any TLS server's would: it had to send a real ClientHello, and we
  answer with a key exchange.
- `RecordSizedSSLProtocol`, a subclass of asyncio's ``SSLProtocol`` whose buffers are sized for
  TLS records: socket reads land in a buffer of one record (16 KiB of payload plus what a
  record adds) instead of 256 KiB, one buffer per server rather than per connection; reading
  from the socket pauses once two records wait undecrypted (the stdlib waits for 256 KiB, which
  a client that does not read its answers can pin per connection); writing pauses the
  application at 64 KiB unsent (the stdlib's 512 KiB; 64 KiB is asyncio's own default for
  plain sockets). The stdlib class is not changed: only our servers make these.

Both rely on asyncio's ``sslproto`` as CPython 3.11 writes it (``SSLProtocol``'s constructor,
its ``max_size``, the ``_ssl_buffer``/``_ssl_buffer_view`` it reads into, its application
transport's buffer-limit setters), which is not a documented API: tests/unit/runtime/
test_tlsconn.py pins each of them on the interpreter the project runs on.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Final

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
        read_buffer: memoryview | None = None,
    ) -> None:
        super().__init__(
            loop,
            app_protocol,
            context,
            waiter,
            server_side=True,
            # Seconds, a float as asyncio reads it (typeshed says int).
            ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
        )
        # Through the application's transport, whose setters only record the limits while
        # nothing is buffered (as now, before the connection is made).
        self._app_transport.set_read_buffer_limits(high=READ_PAUSE_AT, low=RECORD_BUFFER // 2)
        self._app_transport.set_write_buffer_limits(high=WRITE_PAUSE_AT, low=WRITE_PAUSE_AT // 4)
        if read_buffer is not None:
            if len(read_buffer) < self.max_size:
                raise ValueError(f"a read buffer of {len(read_buffer)} bytes holds no record")
            self._ssl_buffer = self._ssl_buffer_view = read_buffer


def _handshake_record_length(header: bytes | bytearray) -> int | None:
    """The payload length a ClientHello's record header announces; None if these 5 bytes
    cannot start a TLS handshake (then OpenSSL, not we, refuses them)."""
    if header[0] != _HANDSHAKE or header[1] != 3:
        return None
    length = int.from_bytes(header[3:5], "big")
    return length if 0 < length <= MAX_PLAINTEXT else None


class FirstRecord(asyncio.BufferedProtocol):
    """Holds a new TLS connection until its first record is whole (module docstring).

    `app` makes the application's protocol for the connection once TLS is set up;
    `handshake_timeout` is the time, from the accept, that the client has to finish its
    handshake; `read_buffer` is shared by every connection of a server and only read into
    during ``get_buffer``/``buffer_updated``, so it costs nothing per connection. `over` is
    called once, with whether the connection came through its handshake (its application
    protocol has been made and told) or ended before (closed, refused, timed out).
    """

    __slots__ = (
        "_app",
        "_buffer",
        "_context",
        "_opened",
        "_over",
        "_received",
        "_timeout",
        "_timer",
        "_transport",
    )

    def __init__(
        self,
        context: ssl.SSLContext,
        app: Callable[[], asyncio.BaseProtocol],
        *,
        handshake_timeout: float,
        read_buffer: memoryview,
        over: Callable[[FirstRecord, bool], None],
    ) -> None:
        self._context = context
        self._app = app
        self._timeout = handshake_timeout
        self._buffer = read_buffer
        self._over: Callable[[FirstRecord, bool], None] | None = over
        self._received = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._opened = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._opened = loop.time()
        self._timer = loop.call_later(self._timeout, transport.abort)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._received += self._buffer[:nbytes]
        if len(self._received) < RECORD_HEADER:
            return
        length = _handshake_record_length(self._received)
        if length is None or len(self._received) >= RECORD_HEADER + length:
            self._hand_over()

    def eof_received(self) -> bool:
        return False  # the client gave up before its ClientHello: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        # Only before the hand-over: the transport's protocol is the TLS one after it.
        self._finish(False)

    def abort(self) -> None:
        """Close the connection at once (the server is stopping), handed over or not."""
        if self._transport is not None:
            self._transport.abort()

    def _finish(self, opened: bool) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        over, self._over = self._over, None
        if over is not None:
            over(self, opened)

    def _hand_over(self) -> None:
        """Make the TLS state, give it the connection, and feed it what was received."""
        transport = self._transport
        assert transport is not None
        if self._timer is not None:  # the TLS protocol has the rest of the time from here
            self._timer.cancel()
            self._timer = None
        loop = asyncio.get_running_loop()
        received, self._received = self._received, bytearray()
        waiter: asyncio.Future[None] = loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        remaining = max(self._timeout - (loop.time() - self._opened), 0.001)
        tls = RecordSizedSSLProtocol(
            loop,
            self._app(),
            self._context,
            waiter,
            handshake_timeout=remaining,
            read_buffer=self._buffer,
        )
        transport.set_protocol(tls)
        tls.connection_made(transport)
        view = memoryview(received)
        while view and not transport.is_closing():
            buffer = tls.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            tls.buffer_updated(size)
            view = view[size:]

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        """The handshake's end, either way. A failed or slow one is that client's problem: a
        debug line, never a traceback (and the waiter's exception is retrieved, so asyncio
        does not log it either)."""
        error = None if waiter.cancelled() else waiter.exception()
        if error is not None:
            log.debug("connection not opened", error=type(error).__name__)
        self._finish(error is None and not waiter.cancelled())
