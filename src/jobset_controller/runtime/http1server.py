"""A small HTTP/1.1 server on asyncio protocols: the webhook, metrics and health endpoints.

Why our own and not aiohttp's server: those endpoints need exact-path routing, a request body,
one header and a status with a body back. aiohttp brought them at ~170 ms of imports before
the first probe could answer (a third of the time from process start to /readyz) and more CPU
per admission request than the admission decision itself.

What it guarantees:
- Requests are read with limits: the request line and headers at most 64 KiB (else 431), a body
  at most `max_body` bytes (else 413, before reading it), one Content-Length of ASCII digits
  (else 400: a second one could make a proxy in front frame the request differently); a
  request with Transfer-Encoding gets 411 (the API server, Prometheus and kubelet all send a
  length). Each of those answers closes the connection.
- A client has `header_timeout` seconds for the TLS handshake, for the head of a request once
  the connection opened or the request started, and again for its body once the head is in
  (a slow or stalled client cannot hold a connection open); an idle keep-alive connection is
  closed after `idle_timeout`.
- One request at a time per connection, in order (pipelined requests wait their turn; reading
  pauses once more than 64 KiB of them is waiting). `Connection: close` and HTTP/1.0 without
  keep-alive close after the answer; `Expect: 100-continue` is answered; an answer to HEAD has
  no body.
- A handler that raises (or answers what cannot be encoded) gets the client a 500 with a fixed
  text; the error is logged with the
  server, method and path only (never headers or body). A client that goes away cancels its
  handler.
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
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

import structlog
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from jobset_controller.runtime.http1 import check_header_value, content_length, keeps_alive

log = structlog.get_logger("httpserver")

_HEAD_LIMIT = 64 * 1024
# Out of descriptors (ours or the system's) or of kernel memory: transient, worth waiting out.
_RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Go's net/http (Server.Serve): 5 ms after the first temporary accept error, doubling, 1 s at most.
ACCEPT_BACKOFF_FIRST: Final = 0.005
ACCEPT_BACKOFF_MAX: Final = 1.0
_LISTEN_BACKLOG: Final = 128


class AcceptErrors(Collector):
    """``jobset_server_accept_errors_total{server,errno}``: accepts refused for lack of resources.

    Why one process-wide collector and not a Counter per server: every server (health, metrics,
    webhook) counts into it without being handed a registry, and the manager registers it once
    (``registry.register(ACCEPT_ERRORS)``). Named as controller-runtime and client-go name their
    counters: ``<namespace>_<subsystem>_<what>_total``.
    """

    name: Final = "jobset_server_accept_errors_total"

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def inc(self, server: str, code: int) -> None:
        key = (server, errno.errorcode.get(code, str(code)))
        self._counts[key] = self._counts.get(key, 0) + 1

    def value(self, server: str, code: int) -> int:
        return self._counts.get((server, errno.errorcode.get(code, str(code))), 0)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            self.name.removesuffix("_total"),
            "Connections a server could not accept for lack of file descriptors or kernel memory "
            "(it backs off 5 ms doubling to 1 s, and serves open connections meanwhile).",
            labels=("server", "errno"),
        )
        for (server, code), count in sorted(self._counts.items()):
            family.add_metric((server, code), count)
        yield family


ACCEPT_ERRORS: Final = AcceptErrors()


def _listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host`` (None: every interface, IPv4 and IPv6
    as asyncio's ``create_server`` binds them), each with SO_REUSEADDR."""
    infos = socket.getaddrinfo(
        host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
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
    ) -> None:
        self.routes = routes
        self.name = name
        self.tls = tls
        self.fallback = fallback
        self.max_body = max_body
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self._sockets: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self._opening: set[asyncio.Task[None]] = set()  # accepted, in their TLS handshake
        self._connections: set[_ServerConnection] = set()
        self.port: int | None = None

    @property
    def serving(self) -> bool:
        return bool(self._sockets)

    async def start(self, host: str | None, port: int) -> None:
        """Bind and serve; OSError if the address is taken. `host` None: all interfaces."""
        loop = asyncio.get_running_loop()
        self._sockets = _listening_sockets(host, port)
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
        """Serve one accepted socket, in a task of its own: a TLS handshake must not hold up the
        loop that accepts the next client."""
        task = asyncio.get_running_loop().create_task(self._connect(conn))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def _connect(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _ServerConnection(self),
                conn,
                ssl=self.tls,
                ssl_handshake_timeout=self.header_timeout if self.tls is not None else None,
            )
        except (OSError, TimeoutError) as error:  # ssl.SSLError is an OSError
            conn.close()  # a failed or slow handshake: that client's problem, nobody else's
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


async def not_found(request: Request) -> Reply:
    return Reply.text("404 page not found\n", 404)


def _refuse(reply: Reply) -> Handler:
    async def refuse(request: Request) -> Reply:
        return reply

    return refuse


class _ServerConnection(asyncio.Protocol):
    """One client connection: reads a request, runs its handler, writes the answer, repeats."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_idle = False  # the timer is the keep-alive one, not a request's
        self._head: tuple[str, str, str, dict[str, str], bool] | None = None
        self._length = 0
        self._continued = False

    # ---- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if not self._server.serving:  # accepted as the server stopped
            transport.abort()
            return
        self._server._connections.add(self)
        self._arm(self._server.header_timeout)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._task is None:
            self._next()
        elif len(self._buffer) > _HEAD_LIMIT and self._transport is not None:
            self._transport.pause_reading()  # a pipelined request waits for the running one

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._connections.discard(self)
        self._disarm()
        if self._task is not None:
            self._task.cancel()
        self._transport = None

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # ---- reading
    def _next(self) -> None:
        """Parse what is buffered; start the handler once a whole request is in."""
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n", 0, _HEAD_LIMIT + 4)
            if end < 0:
                if len(self._buffer) > _HEAD_LIMIT:
                    self._answer_and_close(Reply.text("request headers too large\n", 431))
                elif self._buffer:
                    self._arm_for_request()  # a request started (on an idle line, perhaps)
                return
            head = bytes(self._buffer[:end])
            del self._buffer[: end + 4]
            if not self._read_head(head):
                return
            if len(self._buffer) < self._length:
                self._arm_for_request()  # the body, perhaps on a line that was idle
        if len(self._buffer) < self._length:
            assert self._head is not None
            if self._head[3].get("expect", "").lower() == "100-continue" and not self._continued:
                self._continued = True
                self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        assert self._head is not None
        method, path, query, headers, keep_alive = self._head
        body = bytes(self._buffer[: self._length])
        del self._buffer[: self._length]
        self._head, self._length, self._continued = None, 0, False
        self._disarm()
        request = Request(method, path, query, headers, body)
        self._task = asyncio.get_running_loop().create_task(self._serve(request, keep_alive))

    def _read_head(self, head: bytes) -> bool:
        """Check the request line and headers; False when a refusal was answered."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._answer_and_close(Reply.text("malformed request line\n", 400))
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            name = name.lower()
            if not colon or not name or name != name.strip():
                self._answer_and_close(Reply.text("malformed header\n", 400))
                return False
            if name == "content-length" and name in headers:
                self._answer_and_close(Reply.text("more than one Content-Length\n", 400))
                return False
            headers[name] = value.strip()
        if "transfer-encoding" in headers:
            self._answer_and_close(Reply.text("a request body needs a Content-Length\n", 411))
            return False
        length = content_length(headers.get("content-length", "0"))
        if length is None:
            self._answer_and_close(Reply.text("malformed Content-Length\n", 400))
            return False
        if length > self._server.max_body:
            self._answer_and_close(Reply.text("request body too large\n", 413))
            return False
        keep_alive = keeps_alive(version, headers.get("connection", ""))
        path, _, query = target.partition("?")
        self._head = (method, path, query, headers, keep_alive)
        self._length = length
        return True

    # ---- answering
    async def _serve(self, request: Request, keep_alive: bool) -> None:
        head_only = request.method == "HEAD"
        try:
            reply = await self._server.route(request)(request)
            answer = _encode(reply, keep_alive, head_only)
        except asyncio.CancelledError:
            return  # the client went away, or the server is stopping
        except Exception as error:
            log.error(
                "handler failed",
                server=self._server.name,
                method=request.method,
                path=request.path,
                error=type(error).__name__,
            )
            answer = _encode(Reply.text("internal server error\n", 500), keep_alive, head_only)
        self._task = None
        if self._transport is None:
            return
        self._write(answer)
        if not keep_alive:
            self._transport.close()
            return
        self._transport.resume_reading()
        if self._buffer:
            self._next()
        else:
            self._arm(self._server.idle_timeout, idle=True)

    def _answer_and_close(self, reply: Reply) -> None:
        self._write(_encode(reply, keep_alive=False, head_only=False))
        if self._transport is not None:
            self._transport.close()

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    # ---- timers
    def _arm(self, seconds: float, *, idle: bool = False) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire)
        self._timer_idle = idle

    def _arm_for_request(self) -> None:
        """`header_timeout` for the request under way, unless its timer already runs."""
        if self._timer is None or self._timer_idle:
            self._arm(self._server.header_timeout)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._task is None and self._transport is not None:
            self._transport.close()


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
