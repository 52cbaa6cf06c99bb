"""The generic HTTP/1.1 server on asyncio protocols, under the webhook, metrics and health
endpoints. (Its siblings: runtime/metrics_and_health.py builds the metrics and health servers on
it, and webhook/server.py the admission server; runtime/http1client.py is the API client's
connection pool, the other direction.) It knows routes, requests and replies, nothing of what
they serve.

Why our own and not aiohttp's server: those endpoints need exact-path routing, a request body,
one header and a status with a body back. aiohttp brought them at ~170 ms of imports before
the first probe could answer (a third of the time from process start to /readyz) and more CPU
per admission request than the admission decision itself.

What it guarantees:
- Requests are parsed by llhttp (``httptools``, Node.js's parser), fed only the bytes that
  arrive, each once, and answered as Go's net/http answers them: 400 for a control character in
  a header value (NUL, a bare CR), an invalid header name (a space inside), bare-LF line ends,
  obsolete folding, a Content-Length that is not digits (HTTP's own whitespace aside: no
  ``str.strip``, which would take ``\\xa0``), doubled, or sent with Transfer-Encoding; 505 for
  a version other than HTTP/1.0 and 1.1 (an HTTP/2 preface included); 400 for an HTTP/1.1
  request without a Host header and for any with two (RFC 9112, 3.2). The head is at most 64 KiB
  (else 431), a body at most `max_body` bytes (else 413, before reading it). A POST, PUT or PATCH
  without Content-Length, and any Transfer-Encoding, get 411 (the API server, Prometheus and
  kubelet all send a length).
- A refusal closes the connection with a lingering close: our end is shut (FIN) and what the
  client still sends is read and dropped until its EOF or `_LINGER` seconds, so the kernel does
  not answer unread input with a reset that could discard the answer before it is read.
- A client has `header_timeout` seconds for the TLS handshake, for the head of a request once
  the connection opened or the request started, and again, fresh, for its body once the head is
  in (a slow or stalled client cannot hold a connection open); an idle keep-alive connection is
  closed after `idle_timeout`, and so is one whose client does not read its answers.
- One request at a time per connection, in order. Reading pauses while a whole pipelined
  request waits its turn, and while the client does not read what was written (the transport's
  `pause_writing`): a client pipelining requests without reading answers fills its own socket
  buffers, not our memory. `Connection: close` and HTTP/1.0 without keep-alive close after the
  answer; `Expect: 100-continue` is answered; an answer to HEAD has no body.
- A handler has `handler_timeout` seconds (then 503); one that raises (or answers what cannot
  be encoded), or is cancelled by something of its own, gets the client a 500 with a fixed text
  and the connection goes on; the error is logged with the server, method and path only (never
  headers or body). A client that goes away (or half-closes, as Go reads it) cancels its
  handler.
- Memory is bounded per connection and in total (issue 24). TLS is set up only once a client's
  ClientHello is whole, with buffers sized for TLS records (runtime/tlsconn.py); every read of
  every connection lands in one buffer of the server's (a buffered protocol), so an idle
  connection has no read buffer of its own. Request bodies being read count against one
  `BodyBudget` for the process (32 MiB): a body that does not fit waits, unread, and is answered
  503 if its time runs out first. Closed connections are handed back to the OS in bursts
  (memtrim.TrimAfterCloses). hack/bench/conn_bench.py measures it against Go's net/http.
- Routing is by exact path, then method (404 and 405 otherwise); a `fallback` handler may take
  the paths no route names (the health server's `/<endpoint>/<check>`).
- The accept loop is ours, not asyncio's: out of file descriptors or kernel memory (EMFILE,
  ENFILE, ENOBUFS, ENOMEM) it waits 5 ms, doubling to 1 s, as Go's net/http does, and logs one
  line per episode (when accepting works again, or at stop) with the count of refused accepts;
  `jobset_server_accept_errors_total{server,errno}` counts them as they happen. asyncio's own loop
  logs every refused accept with a traceback (14,504 lines in 17 s at RLIMIT_NOFILE 1024) and
  retries after a fixed 1 s. Connections already open are served throughout: the back-off only
  delays the next accept.
"""

from __future__ import annotations

import asyncio
import errno
import http
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import httptools
import structlog

from jobset_controller.runtime.http1client import check_header_value, content_length
from jobset_controller.runtime.memtrim import TrimAfterCloses
from jobset_controller.runtime.requestline import RequestLines
from jobset_controller.runtime.tlsconn import RECORD_BUFFER, ClientHellos, shape_problem

log = structlog.get_logger("httpserver")

_HEAD_LIMIT = 64 * 1024
# Out of descriptors (ours or the system's) or of kernel memory: transient, worth waiting out.
_RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Go's net/http (Server.Serve): 5 ms after the first temporary accept error, doubling, 1 s at most.
ACCEPT_BACKOFF_FIRST: Final = 0.005
ACCEPT_BACKOFF_MAX: Final = 1.0


def _listen_backlog() -> int:
    """The kernel's own limit on a listener's queue of connections not yet accepted, as Go's
    net package reads it: a burst of thousands of clients (connecting, or reconnecting at
    once when their handshakes time out) then waits in the queue instead of having its SYNs
    dropped, which costs a client behind them 1, 3 or 7 s of retransmissions (measured with
    4000 slow TLS clients and a queue of 128: an AdmissionReview waited 7.7 s)."""
    try:
        with open("/proc/sys/net/core/somaxconn", "rb") as limit:
            return max(1, min(int(limit.read()), 65535))
    except (OSError, ValueError):
        return socket.SOMAXCONN


_LISTEN_BACKLOG: Final = _listen_backlog()
_LINGER: Final = 2.0  # seconds a refused client has to read its answer and stop sending
# Methods whose request has a body: without a Content-Length it cannot be framed (411).
_METHODS_WITH_BODY: Final = frozenset({"POST", "PUT", "PATCH"})
# What every server of the process may hold of request bodies at once (see BodyBudget).
BODY_BUDGET_BYTES: Final = 32 * 1024 * 1024


class AcceptErrors:
    """Accepts refused for lack of resources, by server name and errno name: one process-wide
    count that every server (health, metrics, webhook) adds to without being handed a registry.
    Exported as ``jobset_server_accept_errors_total{server,errno}`` by
    metrics_and_health.AcceptErrorsCollector, which the manager registers; kept free of
    prometheus_client here, so a process that serves no metrics (the in-place restart agent's
    probe) does not load it."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()  # the webhook server counts from a thread of its own

    def inc(self, server: str, code: int) -> None:
        key = (server, errno.errorcode.get(code, str(code)))
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def value(self, server: str, code: int) -> int:
        return self._counts.get((server, errno.errorcode.get(code, str(code))), 0)

    def counts(self) -> list[tuple[tuple[str, str], int]]:
        """((server, errno name), count) pairs, sorted."""
        return sorted(self._counts.items())


ACCEPT_ERRORS: Final = AcceptErrors()


class BodyBudget:
    """The bytes of request bodies the servers hold at once, across all their connections.

    Why: a body is read whole before its handler runs, and each connection may send up to its
    server's `max_body` (8 MiB for the webhook). Without a total, N connections holding a body
    one byte short cost N x 8 MiB (issue 24: 16 such clients, 212 MiB). A request reserves its
    Content-Length here when its head is in, before its body is read; when the budget cannot
    cover it, its connection stops reading and waits, and a request still waiting when its
    body's time runs out is answered 503 (a refusal, closed lingering). A request that fits is
    let through even while a larger one waits (first fit), so one large body in the queue does
    not hold up the small AdmissionReviews behind it; the large one has its time limit.
    Reservations end when the handler has answered, or the connection closes.

    What is read before the wait starts (the part of a body that came in the same read as its
    head) is kept, and is at most one read: the servers read into a buffer of one TLS record
    (16.5 KiB). A body that came whole in that read is served (it is here; holding it back
    frees nothing) and charged, so the budget may be exceeded by at most one read per
    connection, and the bodies after it wait.

    A waiter learns of its reservation on its own loop's next turn (``call_soon``), never inside
    `release`: that runs while another connection parses what is in the server's shared read
    buffer, and a waiter that went on at once could read into it. A reservation delivered to a
    waiter that no longer wants it (its connection closed, its request refused) is handed back.

    Servers on other threads share it (the webhook server runs on a thread of its own:
    runtime/loopthread.py): the counts are changed under a lock, and a waiter on another loop
    is told through that loop (``call_soon_threadsafe``), so it runs on its own thread.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._lock = threading.Lock()
        # Insertion order: the first come is the first considered. Each waiter with its loop.
        self._waiting: dict[Callable[[int], None], tuple[int, asyncio.AbstractEventLoop]] = {}

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def reserve(self, size: int, granted: Callable[[int], None]) -> bool:
        """Reserve `size` bytes now (True), or queue `granted`, to be called on the caller's
        loop with `size` once they are reserved for it (False)."""
        with self._lock:
            if self.used + size <= self.total:
                self.used += size
                return True
            self._waiting[granted] = (size, asyncio.get_running_loop())
            return False

    def charge(self, size: int) -> None:
        """Count `size` bytes held already, whether or not they fit (a body that arrived with
        its head); released as a reservation is."""
        with self._lock:
            self.used += size

    def cancel(self, granted: Callable[[int], None]) -> None:
        """Leave the queue (the request was refused or its connection closed)."""
        with self._lock:
            self._waiting.pop(granted, None)

    def release(self, size: int) -> None:
        grants: list[tuple[Callable[[int], None], int, asyncio.AbstractEventLoop]] = []
        with self._lock:
            self.used -= size
            for granted, (wanted, loop) in list(self._waiting.items()):
                if self.used + wanted <= self.total:
                    del self._waiting[granted]
                    self.used += wanted
                    grants.append((granted, wanted, loop))
        if not grants:
            return
        here = asyncio.get_running_loop()
        for granted, wanted, loop in grants:
            if loop is here:
                loop.call_soon(granted, wanted)
                continue
            try:
                loop.call_soon_threadsafe(granted, wanted)
            except RuntimeError:  # that loop is closed, and the connection with it
                self.release(wanted)


BODY_BUDGET: Final = BodyBudget(BODY_BUDGET_BYTES)
# One for the process: every server's closed connections count towards the same trim.
CONNECTION_TRIM: Final = TrimAfterCloses()


async def _listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host`` (None: every interface, IPv4 and IPv6
    as asyncio's ``create_server`` binds them), each with SO_REUSEADDR."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                continue  # an address family this host does not have (IPv6 off, say)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(_LISTEN_BACKLOG)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"no address to listen on for {host}:{port}")
    return sockets


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str  # the raw query string, without "?"
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, text: str, status: int = 200) -> Reply:
        return cls(status=status, body=text.encode())


Handler = Callable[[Request], Awaitable[Reply]]


class HttpServer:
    """Serves `routes` ({path: {method: handler}}) on one address; see the module docstring."""

    def __init__(
        self,
        routes: Mapping[str, Mapping[str, Handler]],
        *,
        name: str,
        tls: ssl.SSLContext | None = None,
        fallback: Handler | None = None,
        max_body: int = 1 << 20,
        header_timeout: float = 10.0,
        idle_timeout: float = 120.0,
        handler_timeout: float = 30.0,
        body_budget: BodyBudget = BODY_BUDGET,
        trim: TrimAfterCloses = CONNECTION_TRIM,
    ) -> None:
        if max_body > body_budget.total:
            raise ValueError(f"max_body {max_body} exceeds the body budget {body_budget.total}")
        self.routes = routes
        self.name = name
        self.tls = tls
        self.fallback = fallback
        self.max_body = max_body
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.handler_timeout = handler_timeout
        self.body_budget = body_budget
        self._trim = trim
        # Every read of every connection lands here and is parsed (or handed to TLS) before the
        # next read: one buffer of one TLS record for the server, none per connection.
        self._read_buffer = memoryview(bytearray(RECORD_BUFFER))
        self._sockets: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self._opening: set[asyncio.Task[None]] = set()  # accepted, not yet a protocol's
        self._connections: set[_ServerConnection] = set()
        # TLS connections before their handshake is through (see runtime/tlsconn.py), unless
        # this interpreter's asyncio cannot take them (then the stdlib's TLS path, in `_connect`).
        self._hellos = (
            ClientHellos(
                tls,
                lambda: _ServerConnection(self),
                handshake_timeout=header_timeout,
                shutdown_timeout=_LINGER,
                read_buffer=self._read_buffer,
                closed=trim.closed,
            )
            if tls is not None and _record_sized_tls()
            else None
        )
        self.port: int | None = None

    @property
    def serving(self) -> bool:
        return bool(self._sockets)

    async def start(self, host: str | None, port: int) -> None:
        """Bind and serve; OSError if the address is taken. `host` None: all interfaces."""
        loop = asyncio.get_running_loop()
        self._sockets = await _listening_sockets(host, port)
        self.port = self._sockets[0].getsockname()[1]
        self._accepting = [loop.create_task(self._accept_loop(sock)) for sock in self._sockets]

    async def stop(self) -> None:
        """Stop listening and close every connection; safe when not started."""
        sockets, self._sockets = self._sockets, []
        if not sockets:
            return
        accepting, self._accepting = self._accepting, []
        for task in [*accepting, *self._opening]:
            task.cancel()
        await asyncio.gather(*accepting, *self._opening, return_exceptions=True)
        for sock in sockets:
            sock.close()
        if self._hellos is not None:
            self._hellos.close()
        for connection in list(self._connections):
            connection.abort()

    async def _accept_loop(self, sock: socket.socket) -> None:
        """Accept for ever; on a lack of resources back off (module docstring), else go on."""
        loop = asyncio.get_running_loop()
        refused, delay, since, last_error = 0, 0.0, 0.0, 0
        try:
            while True:
                try:
                    conn, _ = await loop.sock_accept(sock)
                except OSError as error:
                    if error.errno not in _RESOURCE_ERRNOS:
                        # ECONNABORTED and the like: that client is gone, the next one is not.
                        log.debug("accept failed", server=self.name, error=str(error))
                        continue
                    if not refused:
                        since = time.monotonic()
                    refused += 1
                    last_error = error.errno
                    ACCEPT_ERRORS.inc(self.name, error.errno)
                    delay = min(ACCEPT_BACKOFF_MAX, max(ACCEPT_BACKOFF_FIRST, delay * 2))
                    await asyncio.sleep(delay)
                    continue
                if refused:
                    self._log_episode(refused, last_error, since)
                    refused, delay = 0, 0.0
                self._open(conn)
        finally:
            if refused:
                self._log_episode(refused, last_error, since)

    def _log_episode(self, refused: int, code: int, since: float) -> None:
        log.warning(
            "accept refused for lack of resources; backed off",
            server=self.name,
            errno=errno.errorcode.get(code, str(code)),
            refused=refused,
            seconds=round(time.monotonic() - since, 3),
        )

    def _open(self, conn: socket.socket) -> None:
        """Serve one accepted socket: a TLS one waits for its ClientHello as a bare socket
        (runtime/tlsconn.py: memory grows with what the client sends), with `header_timeout`
        from now for the whole handshake; a plain one gets its transport, in a task of its own."""
        if self._hellos is not None:
            self._hellos.add(conn)
            return
        task = asyncio.get_running_loop().create_task(self._connect(conn))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def _connect(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.tls is None:
                await loop.connect_accepted_socket(lambda: _ServerConnection(self), conn)
            else:  # the stdlib's TLS path (runtime/tlsconn.py's shape_problem)
                await loop.connect_accepted_socket(
                    lambda: _ServerConnection(self),
                    conn,
                    ssl=self.tls,
                    ssl_handshake_timeout=self.header_timeout,
                    ssl_shutdown_timeout=_LINGER,  # a lingering close's bound (`_linger`)
                )
        except OSError as error:
            conn.close()  # gone before it was served: that client's problem, nobody else's
            log.debug("connection not opened", server=self.name, error=type(error).__name__)
        except asyncio.CancelledError:
            conn.close()
            raise

    def route(self, request: Request) -> Handler:
        methods = self.routes.get(request.path)
        if methods is None:
            return self.fallback or not_found
        handler = methods.get(request.method)
        if handler is None:
            allowed = ", ".join(sorted(methods))
            return _refuse(Reply(405, b"method not allowed\n", headers={"Allow": allowed}))
        return handler


_warned_stdlib_tls = False


def _record_sized_tls() -> bool:
    """Whether TLS connections get record-sized buffers (runtime/tlsconn.py) on this
    interpreter; when not, one warning line for the process says why."""
    global _warned_stdlib_tls
    problem = shape_problem()
    if problem is not None and not _warned_stdlib_tls:
        _warned_stdlib_tls = True
        log.warning(
            "TLS connections use the standard library's buffers (more memory per connection)",
            reason=problem,
        )
    return problem is None


async def not_found(request: Request) -> Reply:
    return Reply.text("404 page not found\n", 404)


def _host_problem(version: str, hosts: int) -> str | None:
    """Go's net/http refusals of a request's Host headers (RFC 9112, 3.2): an HTTP/1.1 request
    must carry exactly one, an HTTP/1.0 one at most one."""
    if hosts > 1:
        return "too many Host headers"
    if hosts == 0 and version == "1.1":
        return "missing required Host header"
    return None


def _refuse(reply: Reply) -> Handler:
    async def refuse(request: Request) -> Reply:
        return reply

    return refuse


class _Stop(Exception):
    """Raised from a parser callback to stop parsing: a refusal is queued, nothing after it
    on this connection will be read as a request."""


@dataclass(frozen=True, slots=True)
class _Refusal:
    """An answer the server gives instead of a handler's, after which the connection closes."""

    reply: Reply


class _ServerConnection(asyncio.BufferedProtocol):
    """One client connection: parses requests (httptools), runs their handlers one at a time, in
    order, writes the answers, and closes with a lingering close after a refusal.

    The parser's callbacks (``on_url``, ``on_header``...) build each request; a whole one is
    queued. Reading pauses while a queued request waits, the client does not read what was
    written (``pause_writing``), or a body waits for the server's `BodyBudget`, so neither
    pipelined requests, unread answers nor bodies pile up.

    A buffered protocol: reads land in the server's one read buffer (`get_buffer`) and are
    parsed at once, so a connection has no read buffer of its own and no read is larger than
    one TLS record. ``__slots__``: an idle connection is this object and its parser, so its
    attributes are kept without a per-instance dict.
    """

    __slots__ = (
        "_body",
        "_budget_wait",
        "_expect_continue",
        "_fed_in_head",
        "_head_size",
        "_headers",
        "_held",
        "_hosts",
        "_in_body",
        "_in_message",
        "_lines",
        "_lingering",
        "_messages",
        "_parser",
        "_parsing",
        "_peer_done",
        "_queue",
        "_reserved",
        "_server",
        "_task",
        "_timer",
        "_timer_kind",
        "_transport",
        "_upgrade",
        "_url",
        "_writing_paused",
    )

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        # The request lines, checked as Go checks them (runtime/requestline.py), and how many
        # requests the parser has begun (a queued request's ordinal is its place in that count).
        self._lines = RequestLines(_HEAD_LIMIT)
        self._messages = 0
        # Whole requests (whether the connection stays open after each, the bytes of the body
        # budget each holds, the request's ordinal on the connection) and refusals.
        self._queue: deque[tuple[Request, bool, int, int] | _Refusal] = deque()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_kind = ""
        self._parsing = True  # False after a refusal: the rest of the input is not requests
        self._writing_paused = False
        self._lingering = False
        self._peer_done = False  # the client sent EOF
        # The message being parsed.
        self._in_message = False
        self._in_body = False
        self._head_size = 0
        self._fed_in_head = 0
        self._url = bytearray()
        self._headers: dict[str, str] = {}
        self._hosts = 0  # Host headers of the message being parsed
        self._body = bytearray()
        self._upgrade = False
        self._expect_continue = False
        # The body budget: what this connection holds in all (`_held`), what the message being
        # parsed holds (`_reserved`), and what it waits for (`_budget_wait`, 0: not waiting).
        self._held = 0
        self._reserved = 0
        self._budget_wait = 0

    # ---- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if not self._server.serving:  # accepted as the server stopped
            transport.abort()
            return
        self._server._connections.add(self)
        self._arm("head", self._server.header_timeout)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._server._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._feed(self._server._read_buffer[:nbytes])

    def _feed(self, data: memoryview) -> None:
        if self._lingering:
            return  # read and dropped, so that closing does not reset what was answered
        if not self._parsing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrade or CONNECT: the request is answered as any other (nothing is upgraded)
            # and the connection closes after it; what follows is not HTTP/1.1.
            self._parsing = False
        except httptools.HttpParserCallbackError as error:
            if not isinstance(error.__context__, _Stop):
                raise
        except httptools.HttpParserError as error:
            self._refuse_parse_error(error)
        else:
            if self._in_message and not self._in_body:
                self._fed_in_head += len(data)
                if self._fed_in_head > 2 * _HEAD_LIMIT:  # one header line without end
                    self._refuse(Reply.text("request headers too large\n", 431))
        self._check_lines(data)  # whichever way the parser stopped: what it queued is checked
        if self._task is not None and self._queue and self._transport is not None:
            self._transport.pause_reading()  # a whole request waits: read no further for now
        if self._budget_wait and self._transport is not None:
            self._transport.pause_reading()  # the body waits for the budget: not read for now
        self._continue()

    def eof_received(self) -> bool:
        """The client's end: the transport closes, and a running handler is cancelled, as Go's
        server cancels a request's context when its connection reads EOF; during a lingering
        close it is the end that was waited for."""
        self._peer_done = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._connections.discard(self)
        self._disarm()
        if self._task is not None:
            self._task.cancel()  # its reservation is released below; its own release finds 0
        self._queue.clear()
        self._transport = None
        self._server.body_budget.cancel(self._budget_granted)
        self._budget_wait = self._reserved = 0
        self._release(self._held)
        self._body = bytearray()
        self._server._trim.closed()

    def pause_writing(self) -> None:
        """The client does not read its answers: stop reading its requests until it does."""
        self._writing_paused = True
        if self._transport is not None:
            self._transport.pause_reading()
        self._arm("write", self._server.idle_timeout)

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._timer_kind == "write":
            self._disarm()
        self._continue()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # ---- parser callbacks (httptools calls them by name)
    def on_message_begin(self) -> None:
        self._messages += 1
        self._in_message, self._in_body = True, False
        self._head_size, self._fed_in_head = 0, 0
        self._url.clear()
        self._headers = {}
        self._hosts = 0
        self._body.clear()
        self._expect_continue = False
        if self._timer_kind in ("", "idle"):
            self._arm("head", self._server.header_timeout)  # a request started on an idle line

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._grow_head(len(name) + len(value) + 4)
        # llhttp has dropped the whitespace before the value; only SP and HTAB are HTTP's
        # whitespace, so only they go after it (str.strip would also take \xa0, \x0b...).
        key = name.decode("latin-1").lower()
        if key == "host":
            self._hosts += 1
        self._headers[key] = value.decode("latin-1").rstrip(" \t")

    def on_headers_complete(self) -> None:
        version = self._parser.get_http_version()
        if version not in ("1.0", "1.1"):
            self._refuse(Reply.text("unsupported HTTP version\n", 505))
            raise _Stop
        host_problem = _host_problem(version, self._hosts)
        if host_problem is not None:
            self._refuse(Reply.text(f"bad request: {host_problem}\n", 400))
            raise _Stop
        if "transfer-encoding" in self._headers:
            self._refuse(Reply.text("a request body needs a Content-Length\n", 411))
            raise _Stop
        text = self._headers.get("content-length")
        method = self._parser.get_method().decode("latin-1")
        if text is None and method in _METHODS_WITH_BODY:
            self._refuse(Reply.text("a request body needs a Content-Length\n", 411))
            raise _Stop
        length = content_length(text or "0")
        if length is None:
            self._refuse(Reply.text("malformed Content-Length\n", 400))
            raise _Stop
        if length > self._server.max_body:
            self._refuse(Reply.text("request body too large\n", 413))
            raise _Stop
        self._upgrade = self._parser.should_upgrade()
        self._lines.body_length(length)
        if length:
            self._in_body = True
            self._expect_continue = self._headers.get("expect", "").lower() == "100-continue"
            if self._server.body_budget.reserve(length, self._budget_granted):
                self._reserved = length
                self._held += length
            else:
                self._budget_wait = length  # reading pauses once this read is parsed
            if self._task is None and not self._queue:
                self._arm("body", self._server.header_timeout)  # the body's own time
                self._send_continue()

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        if self._budget_wait:
            # The whole body came in the read that brought its head (so it is at most one
            # read): nothing is left to hold back. It is charged all the same, so the bodies
            # after it wait for it to be answered.
            self._server.body_budget.cancel(self._budget_granted)
            self._server.body_budget.charge(self._budget_wait)
            self._reserved, self._budget_wait = self._budget_wait, 0
            self._held += self._reserved
        url = self._url.decode("latin-1")
        path, _, query = url.partition("?")
        request = Request(
            self._parser.get_method().decode("latin-1"),
            path,
            query,
            self._headers,
            bytes(self._body),
        )
        keep_alive = self._parser.should_keep_alive() and not self._upgrade
        self._queue.append((request, keep_alive, self._reserved, self._messages - 1))
        self._reserved = 0
        self._in_message = self._in_body = False
        self._url.clear()
        self._body = bytearray()  # the next body starts small, whatever this one grew to
        self._headers = {}
        if not keep_alive:
            self._parsing = False  # nothing after a request that closes the connection
            raise _Stop

    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > _HEAD_LIMIT:
            self._refuse(Reply.text("request headers too large\n", 431))
            raise _Stop

    # ---- the queue
    def _check_lines(self, data: memoryview) -> None:
        """Refuse (400, as Go) the first request whose request line is not exactly METHOD SP
        TARGET SP VERSION, and every request after it; the requests before it are served.
        Only requests the parser began count (after a request that closes the connection, the
        rest of the read is not a request)."""
        bad = self._lines.scan(data)
        if bad is None or bad >= self._messages:
            return
        while self._queue:
            last = self._queue[-1]
            if not isinstance(last, _Refusal) and last[3] < bad:
                break
            self._queue.pop()
            if not isinstance(last, _Refusal):
                self._release(last[2])
        self._refuse(Reply.text("bad request: malformed request line\n", 400))

    def _refuse_parse_error(self, error: httptools.HttpParserError) -> None:
        """Go's answers: 505 for a version other than 1.x, else 400 naming what was wrong."""
        reason = str(error)
        if "HTTP version" in reason or "PRI/Upgrade" in reason:
            self._refuse(Reply.text("unsupported HTTP version\n", 505))
        else:
            self._refuse(Reply.text(f"bad request: {reason.lower()}\n", 400))

    def _refuse(self, reply: Reply) -> None:
        self._parsing = False
        self._queue.append(_Refusal(reply))
        # The message being parsed will not be served: its body's budget is free again.
        self._server.body_budget.cancel(self._budget_granted)
        self._budget_wait = 0
        reserved, self._reserved = self._reserved, 0
        self._release(reserved)

    # ---- the body budget
    def _budget_granted(self, size: int) -> None:
        """The budget reserved what this connection's body waited for: read on (or hand it
        back if the connection no longer waits)."""
        if self._transport is None or self._budget_wait != size:
            self._server.body_budget.release(size)
            return
        self._server.body_budget.cancel(self._budget_granted)  # a later wait of the same size
        self._reserved, self._budget_wait = size, 0
        self._held += size
        if self._task is None and not self._queue:
            self._send_continue()
        transport = self._transport
        if transport is not None and not self._queue and not self._writing_paused:
            transport.resume_reading()
        self._continue()

    def _release(self, size: int) -> None:
        size = min(size, self._held)
        if size:
            self._held -= size
            self._server.body_budget.release(size)

    def _send_continue(self) -> None:
        """``100 Continue`` once the body will be read: its turn has come and it fits the
        budget (a client that waits for it sends nothing before)."""
        if self._expect_continue and not self._budget_wait:
            self._expect_continue = False
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _continue(self) -> None:
        """Start the next queued request, or wait for one, as far as writing allows."""
        transport = self._transport
        if transport is None or self._task is not None or self._lingering:
            return
        if self._writing_paused:
            return
        if self._queue:
            item = self._queue.popleft()
            if isinstance(item, _Refusal):
                self._queue.clear()
                self._write(_encode(item.reply, keep_alive=False, head_only=False))
                self._linger()
                return
            if self._queue or self._budget_wait:
                transport.pause_reading()  # the next request is in: it waits for this answer
            else:
                transport.resume_reading()  # to see the client leave (its handler is cancelled)
            self._disarm()
            self._task = asyncio.get_running_loop().create_task(self._serve(*item[:3]))
            return
        if self._peer_done:
            transport.close()  # every request of a half-closed client is answered
            return
        if not self._parsing:
            self._linger()  # after a request that closes the connection, or an upgrade
            return
        if not self._budget_wait:
            transport.resume_reading()
        if self._in_message:
            if self._timer_kind not in ("head", "body"):
                self._arm("body" if self._in_body else "head", self._server.header_timeout)
        elif self._timer_kind != "idle":
            self._arm("idle", self._server.idle_timeout)

    # ---- answering
    async def _serve(self, request: Request, keep_alive: bool, reserved: int) -> None:
        head_only = request.method == "HEAD"
        answer: bytes | None = None
        try:
            async with asyncio.timeout(self._server.handler_timeout):
                reply = await self._server.route(request)(request)
            answer = _encode(reply, keep_alive, head_only)
        except TimeoutError:
            self._log_failure(request, "deadline")
            answer = _encode(Reply.text("handler timed out\n", 503), keep_alive, head_only)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # ours: the client went away, or the server is stopping
            # The handler's own (it awaited something that was cancelled): a failure like any.
            self._log_failure(request, "CancelledError")
            answer = _encode(Reply.text("internal server error\n", 500), keep_alive, head_only)
        except Exception as error:
            self._log_failure(request, type(error).__name__)
            answer = _encode(Reply.text("internal server error\n", 500), keep_alive, head_only)
        finally:
            self._task = None
            self._release(reserved)  # the handler is done with the body
        if self._transport is None:
            return
        self._write(answer)
        if not keep_alive:
            self._queue.clear()
            self._parsing = False
        self._continue()

    def _log_failure(self, request: Request, error: str) -> None:
        log.error(
            "handler failed",
            server=self._server.name,
            method=request.method,
            path=request.path,
            error=error,
        )

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _linger(self) -> None:
        """Close after the answer so that the client can read it, and say so at once: send our
        end, read and drop what the client still sends, close at its end or after `_LINGER`
        seconds. Closing with unread input would make the kernel send RST, which can discard
        the answer before the client reads it (Go's closeWriteAndWait).

        Our end is a FIN on a plain connection (``write_eof``). asyncio's TLS transport cannot
        half-close (``can_write_eof()`` is always False), so a TLS connection is closed instead:
        that sends close_notify at once (as Go's ``tls.Conn.CloseWrite``), then waits for the
        client's close_notify, dropping what else it sends, for at most its protocol's shutdown
        timeout, which the server sets to `_LINGER` (runtime/tlsconn.py, `_connect`). On the
        stdlib's TLS path (an interpreter whose asyncio has another shape) the close_notify goes
        at once too, but a client still sending after it is dropped at its next record, as
        OpenSSL refuses application data after close_notify: its answer may then be lost."""
        transport = self._transport
        if transport is None or self._lingering:
            return
        self._lingering = True
        if self._peer_done or not transport.can_write_eof():
            transport.resume_reading()  # what the client still sends is read (and dropped)
            transport.close()
            return
        try:
            transport.write_eof()
        except OSError:
            # The client reset the connection after the answer was written (ENOTCONN): there
            # is nobody left to linger for.
            transport.abort()
            return
        transport.resume_reading()
        self._arm("linger", _LINGER)

    # ---- timers
    def _arm(self, kind: str, seconds: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire)
        self._timer_kind = kind

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_kind = ""

    def _expire(self) -> None:
        kind, self._timer, self._timer_kind = self._timer_kind, None, ""
        transport = self._transport
        if transport is None:
            return
        if kind == "body" and self._budget_wait:
            # Its body's time ran out while the budget had no room for it: a busy server
            # says so (and the client can try again), where a slow client is just closed.
            self._refuse(Reply.text("server busy: too many request bodies at once\n", 503))
            self._continue()
            return
        if kind in ("write", "linger") or transport.get_write_buffer_size():
            transport.abort()  # the client does not read: nothing is left to wait for
        elif self._task is None:
            transport.close()


def _encode(reply: Reply, keep_alive: bool, head_only: bool) -> bytes:
    """The answer's bytes; ValueError if a header value could split it."""
    try:
        phrase = http.HTTPStatus(reply.status).phrase
    except ValueError:
        phrase = ""
    head = (
        f"HTTP/1.1 {reply.status} {phrase}\r\n"
        f"Content-Type: {reply.content_type}\r\n"
        f"Content-Length: {len(reply.body)}\r\n"
    )
    for name, value in reply.headers.items():
        check_header_value(name, value)
        head += f"{name}: {value}\r\n"
    if not keep_alive:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode("latin-1") + (b"" if head_only else reply.body)
