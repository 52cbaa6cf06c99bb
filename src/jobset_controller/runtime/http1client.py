"""The API client's HTTP/1.1 connection pool: keep-alive connections to the API server on
asyncio protocols. (Its siblings: runtime/http1server.py is the generic HTTP/1.1 server under the
webhook, metrics and health endpoints; runtime/metrics_and_health.py is the metrics and health
servers built on it.) runtime/client.py's KubeClient sends every request through this pool.

Why our own and not aiohttp's client: a controller sends one kind of request to one server,
JSON in and JSON out, and most of what a general client does per request (URL objects, cookie
jars, header multidicts, redirects, tracing hooks, compression negotiation, a task per read)
is cost without use. Measured on the local control plane, 1000 Job creates 50 in flight:
aiohttp's client spends 0.22-0.25 s of CPU, this pool 0.11-0.12 s, TLS included
(hack/bench/cpu_bench.py's raw-client figures; docs/benchmarks.md, "History", round 3).

What it guarantees:
- At most `limit` requests in flight (100 by default, as client-go's and aiohttp's pools); more
  wait their turn. A connection is reused only after its answer was read to the end and the
  server did not say `Connection: close`, and not once it has been idle for `idle_timeout`
  (45 s, under the API server's 90 s, so the server is not the one closing it as we send;
  checked when a connection is taken, so an unused one can stay open until then).
- Answers parsed by llhttp (`httptools`, as the servers parse requests), framed by
  Content-Length, chunked transfer encoding (trailers skipped), or the end of the connection.
  Why not our own parser any more: llhttp is maintained with Node.js, and measured it costs no
  more CPU per request (hack/bench/cpu_bench.py; CHANGELOG, issue 24). Compression is never
  asked for: on a cluster network it costs both sides more CPU than the bytes it saves.
- A GET or HEAD (`_SAFE_METHODS`) that fails on a REUSED connection before any answer byte
  arrived (the server closed it while idle) is sent once more, on a new connection. Other
  methods are not (as Go's transport): the server may have applied them, so the failure is the
  caller's to judge. A stream (a watch) is never resent here; its caller re-opens it.
- Failures are `TransportError` (an OSError: refused, reset, TLS, a malformed answer, the
  connection closing mid-answer, and no connection within `connect_timeout`, which is a failure
  to reach the server like a refusal, not a slow answer) or `TimeoutError` (the answer: the
  caller's time limit, counted from sending; a stream: silence). A connection that failed,
  timed out, or whose caller was cancelled mid-request is closed, never reused.
- A streamed answer (a watch) is read incrementally; the socket stops being read while more
  than `_STREAM_HIGH_WATER` bytes wait for the reader, so a slow consumer cannot balloon memory.
- Requests go through an HTTP proxy when one is given: CONNECT tunnel for https servers, the
  absolute-form target for http ones, `Proxy-Authorization` from the proxy URL's user info.
- No header value or request target may carry CR, LF or other control characters: a token
  read from a file with a stray newline is refused instead of splitting the request.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import httptools

_HEAD_LIMIT = 1 << 20  # bytes of status line + headers before the answer is called malformed
_STREAM_HIGH_WATER = 1 << 22  # bytes buffered for a stream's reader before reading pauses
_STREAM_LOW_WATER = 1 << 20
_NO_BODY_STATUSES = frozenset((204, 304))
_SAFE_METHODS = frozenset(("GET", "HEAD"))


class TransportError(ConnectionError):
    """The request could not be sent or its answer not read (not an HTTP error status)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: the server, its TLS context, and the proxy between (if any)."""

    scheme: str
    host: str
    port: int
    ssl_context: ssl.SSLContext | None
    proxy: str | None = None  # http://[user:pass@]host:port

    @classmethod
    def for_url(
        cls, server: str, ssl_context: ssl.SSLContext | None, proxy: str | None = None
    ) -> Endpoint:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server {server!r}: not an http(s) URL with a host")
        if proxy is not None and not _usable_proxy(proxy):
            raise ValueError(f"proxy {_redact(proxy)!r}: only http://host[:port] proxies")
        return cls(
            scheme=parts.scheme,
            host=parts.hostname,
            port=parts.port or default_port(parts.scheme),
            ssl_context=ssl_context if parts.scheme == "https" else None,
            proxy=proxy,
        )

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def check_header_value(name: str, value: str) -> None:
    """ValueError if `value` could end the header early (CR, LF, other control characters) or
    is not ASCII."""
    if not (value.isascii() and value.isprintable()):
        raise ValueError(f"header {name}: only printable ASCII is allowed")


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def content_length(text: str) -> int | None:
    """A Content-Length value as a number, or None unless it is 1-18 ASCII digits (the
    client and the server frame bodies by the same rule)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


def check_target(target: str) -> None:
    """ValueError unless `target` is visible ASCII (no spaces, no control characters)."""
    if not (target.isascii() and target.isprintable()) or " " in target or not target:
        raise ValueError(f"request target {target[:200]!r}: only visible ASCII is allowed")


# ------------------------------------------------------------------------------- the wire
class _Unasked(Exception):
    """Raised from a parser callback to stop parsing: what follows was not asked for (a second
    answer, or whatever comes after an answer whose body is not read)."""


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: writes a request, parses the answer as bytes arrive.

    Answers are parsed by llhttp (`httptools`, the servers' parser too): framing by
    Content-Length, chunks (trailers skipped) or the connection's end, interim 1xx answers
    skipped. States: "idle" (no request), "head" (before the answer's headers are complete),
    "body" (framed by length or chunks), "close" (body until EOF), "done" (answer complete).
    A parser serves the answers of one connection in turn; after an answer whose body is not
    read (HEAD, a CONNECT tunnel) or a parse error it is replaced for the next request.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.received = 0  # bytes of the current answer received so far
        self.idle_since = 0.0
        self._parser: httptools.HttpResponseParser | None = None
        self._head_bytes = 0
        self._state = "idle"
        self._status = 0
        self._headers: dict[str, str] = {}
        self._pieces: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._head_waiter: asyncio.Future[None] | None = None
        self._data_waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._expect_body = True
        # Timeouts are one timer per request, not a wrapper per await: a deadline for a whole
        # answer, or a silence limit for a stream (reset by every byte that arrives).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._silence: float | None = None
        self._last_read = 0.0

    # ---- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state == "idle":  # bytes nobody asked for: the connection is not trustworthy
            self.reusable = False
            self._close_transport()
            return
        if state == "done":  # more than the answer: unasked for
            self.reusable = False
            return
        self.received += len(data)
        if self._silence is not None:
            assert self._loop is not None
            self._last_read = self._loop.time()
        if state == "head":  # llhttp keeps no limit of its own on a head
            if self._head_bytes > _HEAD_LIMIT:
                self._fail(TransportError("answer headers larger than 1 MiB"))
                return
            self._head_bytes += len(data)
        assert self._parser is not None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            self._parser = None  # stopped mid-way: a new one for the next request
            if not isinstance(error.__context__, _Unasked):
                raise
            self.reusable = False
        except httptools.HttpParserError as error:
            self._parser = None
            if self._state == "done":  # what followed a whole answer: the answer stands
                self.reusable = False
            else:
                self._fail(TransportError(f"malformed answer: {error}"))

    def eof_received(self) -> bool | None:
        self.reusable = False
        if self._state == "close":
            self._finish()
        return None  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self._state == "close" and exc is None:
            self._finish()  # the end of the connection was the end of the answer
        elif self._state not in ("idle", "done"):
            reason = f": {exc}" if exc else ""
            self._fail(TransportError(f"connection closed before the answer was complete{reason}"))

    def pause_writing(self) -> None:  # bodies are small; the transport buffers them
        pass

    def resume_writing(self) -> None:
        pass

    # ---- parser callbacks (httptools calls them by name)
    def on_message_begin(self) -> None:
        if self._state == "done":
            raise _Unasked  # a second answer to one request
        self._headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        # llhttp has dropped the whitespace before the value; HTTP's after it goes here.
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1").rstrip(" \t")

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            return
        self._status = status
        if not self._parser.should_keep_alive():
            self.reusable = False
        headers = self._headers
        if not self._expect_body:
            # A HEAD answer, or a proxy's to CONNECT: llhttp, which does not know the request,
            # would read a Content-Length as a body to come. Parsing stops here; what else the
            # read held is not known to be nothing, so the connection is not reused.
            self._finish()
            raise _Unasked
        if status in _NO_BODY_STATUSES:
            self._finish()  # llhttp knows: the message completes with no body
            return
        if "chunked" not in headers.get("transfer-encoding", "").lower() and (
            "content-length" not in headers
        ):
            self.reusable = False
            self._state = "close"
        else:
            self._state = "body"
        _wake(self._head_waiter)

    def on_body(self, body: bytes) -> None:
        self._deliver(body)

    def on_message_complete(self) -> None:
        if self._state in ("body", "close"):
            self._finish()
        # "head": an interim answer ended; "done": an answer without body, finished already.

    # ---- requests
    def send(
        self,
        data: bytes,
        *,
        expect_body: bool,
        time_limit: float | None = None,
        silence: float | None = None,
    ) -> None:
        """Write a request. The answer fails with TimeoutError if it is not complete within
        `time_limit` seconds, or if no byte of it arrives for `silence` seconds."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._cancel_timer()
        self._silence = silence
        if time_limit is not None:
            self._timer = loop.call_later(time_limit, self._time_out, time_limit)
        elif silence is not None:
            self._last_read = loop.time()
            self._timer = loop.call_later(silence, self._check_silence)
        if self._parser is None:
            self._parser = httptools.HttpResponseParser(self)
        self._state = "head"
        self._head_bytes = 0
        self._expect_body = expect_body
        self._status, self._headers = 0, {}
        self._pieces.clear()
        self._buffered = 0
        self._error = None
        self.received = 0
        self._head_waiter = loop.create_future()
        self._data_waiter = None
        self.transport.write(data)

    async def head(self) -> tuple[int, dict[str, str]]:
        assert self._head_waiter is not None
        await self._head_waiter
        return self._status, self._headers

    async def next_piece(self) -> bytes | None:
        """The next piece of body, or None at its end; waits while none is buffered."""
        while not self._pieces:
            if self._error is not None:
                raise self._error
            if self._state == "done":
                return None
            self._data_waiter = asyncio.get_running_loop().create_future()
            await self._data_waiter
        piece = self._pieces.popleft()
        self._buffered -= len(piece)
        if self._paused and self._buffered <= _STREAM_LOW_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
            if self._loop is not None:  # the silence limit counts from now, not from the pause
                self._last_read = self._loop.time()
        return piece

    async def body(self) -> bytes:
        pieces = []
        while (piece := await self.next_piece()) is not None:
            pieces.append(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def close(self) -> None:
        self.reusable = False
        self._cancel_timer()
        self._close_transport()

    # ---- timers
    def _time_out(self, seconds: float) -> None:
        self._timer = None
        self._fail(TimeoutError(f"no complete answer within {seconds:g} s"))

    def _check_silence(self) -> None:
        self._timer = None
        if self._state == "done" or self._silence is None or self._loop is None:
            return
        quiet_until = self._last_read + self._silence
        if self._loop.time() >= quiet_until and not self._paused:  # paused: our reader is slow
            self._fail(TimeoutError(f"no data for {self._silence:g} s"))
        else:
            self._timer = self._loop.call_at(
                max(quiet_until, self._loop.time() + 0.1), self._check_silence
            )

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deliver(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._buffered += len(piece)
        if self._buffered > _STREAM_HIGH_WATER and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        _wake(self._data_waiter)

    def _finish(self) -> None:
        self._state = "done"
        self._cancel_timer()
        self.idle_since = time.monotonic()
        _wake(self._head_waiter)
        _wake(self._data_waiter)

    def _fail(self, error: BaseException) -> None:
        self._cancel_timer()
        self._error = error
        self._state = "done"
        self.reusable = False
        for waiter in (self._head_waiter, self._data_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
                # Nobody may be waiting on the head any more (a stream's reader waits on data).
                waiter.exception()
        self._close_transport()

    def _close_transport(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    @property
    def at_rest(self) -> bool:
        """The last answer was read to its end (and nothing failed)."""
        return self._state == "done" and self._error is None and not self._pieces


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


# ------------------------------------------------------------------------------- the pool
class Stream:
    """A response being read: the status and headers, then the body piece by piece."""

    def __init__(self, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._connection = connection

    async def read(self) -> bytes:
        return await self._connection.body()

    async def pieces(self) -> AsyncIterator[bytes]:
        """Body pieces as they arrive; TimeoutError once the server is silent for the stream's
        `read_timeout` (ConnectionPool.stream)."""
        while (piece := await self._connection.next_piece()) is not None:
            yield piece


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections to one endpoint (module docstring: guarantees)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        limit: int = 100,
        connect_timeout: float = 10.0,
        idle_timeout: float = 45.0,
        user_agent: str = "",
    ) -> None:
        self.endpoint = endpoint
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._closed = False
        # The request line's target prefix and the Host header (absolute-form through an http
        # proxy), and the Proxy-Authorization header, decided once.
        self._target_prefix = ""
        self._fixed_headers = f"Host: {endpoint.authority}\r\n"
        if user_agent:
            check_header_value("User-Agent", user_agent)
            self._fixed_headers += f"User-Agent: {user_agent}\r\n"
        self._proxy_authorization = _proxy_authorization(endpoint.proxy)
        if endpoint.proxy and endpoint.scheme == "http":
            self._target_prefix = f"http://{endpoint.authority}"
            if self._proxy_authorization:
                self._fixed_headers += f"Proxy-Authorization: {self._proxy_authorization}\r\n"

    async def close(self) -> None:
        self._closed = True
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    async def request(
        self,
        method: str,
        target: str,
        headers: str,
        body: bytes | None,
        *,
        time_limit: float | None,
    ) -> Response:
        """Send one request and read its whole answer.

        `headers` is a block of "Name: value\\r\\n" lines whose values the caller checked
        (check_header_value); Host, User-Agent and Content-Length are added here.
        """
        async with self._slots:
            fresh = False
            for attempt in (0, 1):
                connection, reused = await self._acquire(fresh=fresh)
                try:
                    connection.send(
                        self._encode(method, target, headers, body),
                        expect_body=method != "HEAD",
                        time_limit=time_limit,
                    )
                    status, answer_headers = await connection.head()
                    data = await connection.body()
                except TransportError:
                    connection.close()
                    unanswered = reused and connection.received == 0
                    if attempt == 0 and unanswered and method in _SAFE_METHODS:
                        fresh = True
                        continue
                    raise
                except BaseException:
                    connection.close()  # timeout or cancellation mid-answer
                    raise
                self._release(connection)
                return Response(status, answer_headers, data)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, target: str, headers: str, *, read_timeout: float
    ) -> AsyncIterator[Stream]:
        """Send one request and yield its answer for reading as it arrives (a watch); waiting
        for it fails with TimeoutError once the server sends nothing for `read_timeout`
        seconds. The connection is reused only if the body was read to its end."""
        async with self._slots:
            connection, _ = await self._acquire()
            try:
                request = self._encode(method, target, headers, None)
                connection.send(request, expect_body=True, silence=read_timeout)
                status, answer_headers = await connection.head()
                yield Stream(connection, status, answer_headers)
            except BaseException:
                connection.close()
                raise
            self._release(connection)

    # ---- plumbing
    def _encode(self, method: str, target: str, headers: str, body: bytes | None) -> bytes:
        head = f"{method} {self._target_prefix}{target} HTTP/1.1\r\n{self._fixed_headers}{headers}"
        if body is None:
            return (head + "\r\n").encode("latin-1")
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body

    async def _acquire(self, *, fresh: bool = False) -> tuple[_Connection, bool]:
        """An idle connection (True) or a new one (False); `fresh`: always a new one."""
        if self._closed:
            raise TransportError("the client is closed")
        now = time.monotonic()
        while self._idle and not fresh:
            connection = self._idle.pop()
            if connection.closed or not connection.reusable:
                continue
            if now - connection.idle_since > self._idle_timeout:
                connection.close()
                continue
            return connection, True
        return await self._connect(), False

    def _release(self, connection: _Connection) -> None:
        if self._closed or not connection.reusable or connection.closed or not connection.at_rest:
            connection.close()
        else:
            connection._state = "idle"
            self._idle.append(connection)

    async def _connect(self) -> _Connection:
        endpoint = self.endpoint
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                if endpoint.proxy is None:
                    _, connection = await loop.create_connection(
                        _Connection,
                        endpoint.host,
                        endpoint.port,
                        ssl=endpoint.ssl_context,
                        server_hostname=endpoint.host if endpoint.ssl_context else None,
                    )
                    return connection
                return await self._connect_through_proxy(loop)
        except TimeoutError:
            raise TransportError(
                f"connecting to {endpoint.authority}: no answer in {self._connect_timeout:g} s"
            ) from None
        except OSError as error:  # ssl.SSLError included
            if isinstance(error, TransportError):
                raise
            raise TransportError(f"connecting to {endpoint.authority}: {error}") from error

    async def _connect_through_proxy(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        endpoint = self.endpoint
        assert endpoint.proxy is not None
        proxy = urlsplit(endpoint.proxy)
        assert proxy.hostname  # Endpoint.for_url accepts only proxies with a host
        _, connection = await loop.create_connection(_Connection, proxy.hostname, proxy.port or 80)
        if endpoint.ssl_context is None:  # plain http: absolute-form targets, no tunnel
            return connection
        request = f"CONNECT {endpoint.authority} HTTP/1.1\r\nHost: {endpoint.authority}\r\n"
        if self._proxy_authorization:
            request += f"Proxy-Authorization: {self._proxy_authorization}\r\n"
        try:
            # The proxy's answer to CONNECT has no body; the bytes after it are the server's.
            connection.send((request + "\r\n").encode("latin-1"), expect_body=False)
            status, _ = await connection.head()
            if status != 200:
                raise TransportError(
                    f"proxy {proxy.hostname}:{proxy.port} refused CONNECT: {status}"
                )
            assert connection.transport is not None
            tunnel = _Connection()
            transport = await loop.start_tls(
                connection.transport, tunnel, endpoint.ssl_context, server_hostname=endpoint.host
            )
        except BaseException:
            connection.close()  # a refusal, a timeout or a cancellation: no socket left open
            raise
        assert transport is not None
        tunnel.connection_made(transport)
        return tunnel


def _usable_proxy(proxy: str) -> bool:
    parts = urlsplit(proxy)
    try:
        port = parts.port  # ValueError when out of range
    except ValueError:
        return False
    return parts.scheme == "http" and bool(parts.hostname) and port != 0


def _proxy_authorization(proxy: str | None) -> str:
    if proxy is None:
        return ""
    parts = urlsplit(proxy)
    if parts.username is None:
        return ""
    user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    value = "Basic " + base64.b64encode(user_pass.encode()).decode("ascii")
    check_header_value("Proxy-Authorization", value)
    return value


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)
