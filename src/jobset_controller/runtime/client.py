"""The one place that talks to the Kubernetes API server.

Why not the generated API classes: they deserialise into model objects 20-40x slower than a raw
JSON parse, hold three times the memory, drop unknown fields, and send a dict given to a typed
patch method as a strategic-merge patch, which CRDs reject. So this wrapper speaks raw JSON over
our own HTTP/1.1 connection pool (runtime/http1client.py: half the CPU per request of
aiohttp's client, measured); where the server is and which credentials to send come from
runtime/kubeconfig.py (which hands exec and auth-provider kubeconfigs to the official loader).

What it adds, like client-go's rest client:
- a client-side token bucket (QPS/burst as the caller says, read as client-go reads them:
  `ratelimit.client_throttle`; the controller's come from its Configuration);
- a User-Agent naming the controller and its version;
- retries of 429 and 5xx answers that carry Retry-After (at most `max_retries`), and of
  connection errors for reads, with backoff;
- explicit content types for merge patch and server-side apply;
- HTTP status mapped to exceptions once, here (`NotFound`, `Conflict`, `AlreadyExists`, `Gone`,
  `Invalid`, `TooManyRequests`, `ServerError`), so callers decide with `except`, not with numbers;
  a request that could not be sent or answered raises `TransportError` (an OSError) or
  `TimeoutError`;
- waits (throttling, backoff, Retry-After) and latencies measured on an injected Clock, jitter
  drawn from an injected RandomSource, so tests can step them on virtual time;
- `rest_client_requests_total` and `rest_client_request_duration_seconds` metrics
  (runtime/client_metrics.py) in the registry the client is given (none without one);
- a watch stream reader that splits lines itself (objects of any size) and has a read timeout,
  so a half-open connection cannot hang a watch;
- the proxy the environment names for the API server (HTTPS_PROXY/HTTP_PROXY and NO_PROXY, read
  once at connect with the rules of Go's net/http, which client-go uses): a loopback server is
  never proxied, NO_PROXY entries match a host, a domain and its subdomains, an IP, a CIDR, or
  `*`, optionally with a port. netrc is not read (client-go ignores it too).
Headers and the metric children are built once, not per request.
"""

from __future__ import annotations

import ipaddress
import os
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlencode, urlsplit

import orjson

from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.http1client import (
    ConnectionPool,
    Endpoint,
    Response,
    Stream,
    TransportError,
    check_header_value,
    check_target,
    default_port,
)
from jobset_controller.runtime.kubeconfig import ClusterAccess, Credentials
from jobset_controller.runtime.kubeconfig import load as load_access
from jobset_controller.runtime.ratelimit import TokenBucket, client_throttle

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from jobset_controller.runtime.client_metrics import RestClientMetrics

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

_POOL_SIZE = 100
_CONNECT_TIMEOUT = 10.0


# The Status cause of a create refused because its namespace is being deleted (a 403 that never
# passes, unlike the 403 of an API server whose authorizer has not synced yet).
NAMESPACE_TERMINATING: Final = "NamespaceTerminating"


class ApiError(Exception):
    """An error answer from the API server, with its Status body."""

    def __init__(self, status: int, body: Mapping[str, Any], method: str = "", path: str = ""):
        self.status = status
        self.body = dict(body)
        self.reason: str = str(body.get("reason", ""))
        self.message: str = str(body.get("message", "")) or f"HTTP {status}"
        self.retry_after: float | None = None
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}".strip())

    def has_cause(self, cause: str) -> bool:
        """Whether the Status names `cause` among `details.causes` (e.g. NAMESPACE_TERMINATING).
        A cause's type is its `reason` field in JSON (Go's StatusCause.Type is tagged so)."""
        details = self.body.get("details")
        causes = details.get("causes") if isinstance(details, Mapping) else None
        if not isinstance(causes, list):
            return False
        return any(isinstance(c, Mapping) and c.get("reason") == cause for c in causes)

    @property
    def namespace_terminating(self) -> bool:
        """A write refused because its namespace is being deleted: no retry can pass."""
        return self.status == 403 and self.has_cause(NAMESPACE_TERMINATING)


class NotFound(ApiError):
    """404."""


class Conflict(ApiError):
    """409 with a stale resourceVersion: reconcile again from fresh state."""


class AlreadyExists(Conflict):
    """409 AlreadyExists on create: the object is there, which is what the caller wanted."""


class Gone(ApiError):
    """410 Gone / Expired: the resourceVersion is too old; relist."""


class Invalid(ApiError):
    """422: the object failed validation; the message names the fields."""


class Forbidden(ApiError):
    """403: RBAC or an admission policy said no."""


class TooManyRequests(ApiError):
    """429 after the retries were used up."""


class ServerError(ApiError):
    """5xx after the retries were used up."""


def error_for(status: int, body: Mapping[str, Any], method: str = "", path: str = "") -> ApiError:
    if status == 404:
        return NotFound(status, body, method, path)
    if status == 409:
        if body.get("reason") == "AlreadyExists":
            return AlreadyExists(status, body, method, path)
        return Conflict(status, body, method, path)
    if status == 410:
        return Gone(status, body, method, path)
    if status == 422:
        return Invalid(status, body, method, path)
    if status == 403:
        return Forbidden(status, body, method, path)
    if status == 429:
        return TooManyRequests(status, body, method, path)
    if status >= 500:
        return ServerError(status, body, method, path)
    return ApiError(status, body, method, path)


@dataclass(frozen=True)
class ClientSettings:
    """Knobs of the client. Without a QPS the client has no client-side limit (what tools and
    tests want); the controller always passes its Configuration's `clientConnection`."""

    qps: float = -1.0
    burst: int = 0
    user_agent: str = "jobset-controller"
    max_retries: int = 10
    request_timeout: float = 30.0


class Transport(Protocol):
    """What KubeClient sends requests through (runtime/http1client.ConnectionPool; a script in
    tests)."""

    async def request(
        self,
        method: str,
        target: str,
        headers: str,
        body: bytes | None,
        *,
        time_limit: float | None,
    ) -> Response: ...

    def stream(
        self, method: str, target: str, headers: str, *, read_timeout: float
    ) -> AbstractAsyncContextManager[Stream]: ...

    async def close(self) -> None: ...


class KubeClient:
    """Raw-JSON access to one API server. Create with `connect()`, close with `close()`."""

    def __init__(
        self,
        *,
        server: str,
        transport: Transport,
        credentials: Credentials,
        settings: ClientSettings,
        metrics: RestClientMetrics | None,
        bucket: TokenBucket | None,
        clock: Clock | None = None,
        rng: RandomSource = random,
    ) -> None:
        self.server = server.rstrip("/")
        self._clock: Clock = clock or RealClock()
        self._rng = rng
        parts = urlsplit(self.server)
        self._host = parts.netloc
        # Requests carry only a path: a server URL with a path prefix (a proxy in front of the
        # API server, as kubeconfigs allow) puts it before each one.
        self._path_prefix = parts.path.rstrip("/")
        self._transport = transport
        self._credentials = credentials
        self.settings = settings
        self._metrics = metrics
        self._bucket = bucket
        # Header blocks per content type (None: no body), the token appended per request.
        self._base_headers: dict[str | None, str] = {}
        self._counters: dict[tuple[str, str], Any] = {}
        self._latencies: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        settings: ClientSettings | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        rng: RandomSource = random,
    ) -> KubeClient:
        """Load credentials (kubeconfig, else $KUBECONFIG/~/.kube/config, else in-cluster:
        runtime/kubeconfig.py) and open the connection pool."""
        return cls.for_access(
            await load_access(kubeconfig, context),
            settings=settings,
            registry=registry,
            clock=clock,
            rng=rng,
        )

    @classmethod
    def for_access(
        cls,
        access: ClusterAccess,
        *,
        settings: ClientSettings | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        rng: RandomSource = random,
    ) -> KubeClient:
        """A client for a server and credentials already loaded; must run in the event loop."""
        settings = settings or ClientSettings()
        clock = clock or RealClock()
        bucket = client_throttle(settings.qps, settings.burst, clock=clock)  # may refuse: first
        # 100 connections, as the official client's pool; the proxy looked up once, here.
        pool = ConnectionPool(
            Endpoint.for_url(access.server, access.ssl_context, env_proxy(access.server)),
            limit=_POOL_SIZE,
            connect_timeout=_CONNECT_TIMEOUT,
            user_agent=settings.user_agent,
        )
        metrics = None
        if registry is not None:
            # Imported only here: prometheus_client costs ~4.5 MiB and ~25 ms of a process's
            # start, and a process that keeps no registry (the in-place restart agent, in every
            # pod of a JobSet; the command-line tools) would never read the figures.
            from jobset_controller.runtime.client_metrics import RestClientMetrics

            metrics = RestClientMetrics(registry)
        return cls(
            server=access.server,
            transport=pool,
            credentials=access.credentials,
            settings=settings,
            metrics=metrics,
            bucket=bucket,
            clock=clock,
            rng=rng,
        )

    def with_own_budget(self) -> KubeClient:
        """A client of the same server, connections, credentials and metrics, with a
        client-side rate limit of its own (the same QPS and burst): what controller-runtime
        gives an event recorder, so that its writes neither wait behind the reconciles' nor
        spend their budget (runtime/events.py). Close only the original: the connections are
        its."""
        return KubeClient(
            server=self.server,
            transport=self._transport,
            credentials=self._credentials,
            settings=self.settings,
            metrics=self._metrics,
            bucket=client_throttle(self.settings.qps, self.settings.burst, clock=self._clock),
            clock=self._clock,
            rng=self._rng,
        )

    async def close(self) -> None:
        await self._transport.close()

    # ------------------------------------------------------------------------ plumbing
    async def _headers(self, content_type: str | None) -> str:
        """The request's header lines (Host, User-Agent and Content-Length come from the pool)."""
        base = self._base_headers.get(content_type)
        if base is None:
            base = f"Accept: {JSON}\r\n"
            if content_type:
                base += f"Content-Type: {content_type}\r\n"
            self._base_headers[content_type] = base
        # Asked every time: an exec plugin or a projected token may have refreshed it.
        authorization = await self._credentials.authorization()
        if not authorization:
            return base
        check_header_value("Authorization", authorization)
        return f"{base}Authorization: {authorization}\r\n"

    def _count(self, code: str, method: str) -> None:
        if self._metrics is None:
            return
        counter = self._counters.get((code, method))
        if counter is None:
            counter = self._metrics.requests.labels(code, method, self._host)
            self._counters[(code, method)] = counter
        counter.inc()

    def _observe(self, method: str, seconds: float) -> None:
        if self._metrics is None:
            return
        latency = self._latencies.get(method)
        if latency is None:
            latency = self._metrics.latency.labels(method, self._host)
            self._latencies[method] = latency
        latency.observe(seconds)

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        target = self._path_prefix + path + ("?" + urlencode(query) if query else "")
        check_target(target)
        return target

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        request_timeout: float | None = None,
        decode: bool = True,
    ) -> dict[str, Any]:
        """One API call with throttling and retries; returns the decoded JSON body (an empty
        dict when `decode` is False and the call succeeded: a caller that only needs to know
        it worked skips parsing the object the server echoes)."""
        target = self._target(path, params)
        payload = None if body is None else orjson.dumps(body)
        time_limit = request_timeout or self.settings.request_timeout
        attempt = 0
        while True:
            if self._bucket is not None:
                await self._bucket.acquire()
            started = self._clock.now()
            code = "<error>"
            try:
                headers = await self._headers(content_type if payload is not None else None)
                response = await self._transport.request(
                    method, target, headers, payload, time_limit=time_limit
                )
                code = str(response.status)
            except (TransportError, TimeoutError):
                if method != "GET" or attempt >= self.settings.max_retries:
                    raise
                attempt += 1
                await self._clock.sleep(_backoff(attempt, self._rng))
                continue
            finally:
                self._count(code, method)
                self._observe(method, self._clock.now() - started)
            raw, status = response.body, response.status
            retry_after = response.headers.get("retry-after")
            if status < 400:
                return _decode(raw) if decode else {}
            decoded = _decode(raw)
            delay = _retry_delay(status, retry_after, attempt, self._rng)
            if delay is not None and attempt < self.settings.max_retries:
                attempt += 1
                await self._clock.sleep(delay)
                continue
            error = error_for(status, decoded, method, path)
            error.retry_after = _parse_retry_after(retry_after)
            raise error

    # ------------------------------------------------------------------------ verbs
    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return await self.request("GET", path, params=params)

    async def create(
        self, path: str, body: Mapping[str, Any], *, decode: bool = True, **params: Any
    ) -> dict[str, Any]:
        return await self.request("POST", path, params=params, body=body, decode=decode)

    async def replace(self, path: str, body: Mapping[str, Any], **params: Any) -> dict[str, Any]:
        return await self.request("PUT", path, params=params, body=body)

    async def merge_patch(
        self, path: str, patch: Mapping[str, Any], **params: Any
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH", path, params=params, body=patch, content_type=MERGE_PATCH
        )

    async def apply(
        self, path: str, body: Mapping[str, Any], *, field_manager: str, force: bool = True
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH",
            path,
            params={"fieldManager": field_manager, "force": force},
            body=body,
            content_type=APPLY_PATCH,
        )

    async def delete(
        self,
        path: str,
        *,
        propagation: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            options["propagationPolicy"] = propagation
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v is not None
        }
        if preconditions:
            options["preconditions"] = preconditions
        return await self.request("DELETE", path, body=options)

    async def watch(
        self,
        path: str,
        *,
        params: Mapping[str, Any],
        read_timeout: float,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events ({"type", "object"}) until the server ends the stream.

        An HTTP error status raises the mapped ApiError; a read silent for `read_timeout`
        raises TimeoutError.
        """
        if self._bucket is not None:
            await self._bucket.acquire()
        target = self._target(path, {**params, "watch": True})
        async with self._transport.stream(
            "GET", target, await self._headers(None), read_timeout=read_timeout
        ) as response:
            self._count(str(response.status), "GET")
            if response.status >= 400:
                raise error_for(response.status, _decode(await response.read()), "WATCH", path)
            # Pieces of a line not yet ended: joined once its newline comes (an object of any
            # size costs one join, not a copy per piece).
            pending: list[bytes] = []
            async for piece in response.pieces():
                if b"\n" not in piece:
                    pending.append(piece)
                    continue
                if pending:
                    pending.append(piece)
                    piece = b"".join(pending)
                    pending.clear()
                *lines, rest = piece.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
                if rest:
                    pending.append(rest)
            tail = b"".join(pending)
            if tail.strip():
                yield orjson.loads(tail)


def env_proxy(server: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL the environment names for `server`, or None (module docstring: the rules).

    HTTPS_PROXY for an https server, HTTP_PROXY for an http one (upper case first, then lower
    case); a value without a scheme means http://. A loopback server is never proxied: a proxy
    could not reach this host's 127.0.0.1 anyway (Go's net/http rule).
    """
    env = os.environ if environ is None else environ
    parts = urlsplit(server)
    host = (parts.hostname or "").lower()
    if not host or _is_loopback(host):
        return None
    names = (
        ("HTTPS_PROXY", "https_proxy") if parts.scheme == "https" else ("HTTP_PROXY", "http_proxy")
    )
    proxy = next((env[name] for name in names if env.get(name)), "")
    if not proxy:
        return None
    no_proxy = env.get("NO_PROXY") or env.get("no_proxy") or ""
    port = parts.port or default_port(parts.scheme)
    if any(_bypasses(entry, host, port) for entry in no_proxy.split(",")):
        return None
    return proxy if "://" in proxy else "http://" + proxy


def _bypasses(entry: str, host: str, port: int) -> bool:
    """Whether one NO_PROXY entry exempts host:port (Go's httpproxy matching): IPs and CIDRs
    match IP hosts by value, names match names (the name or a subdomain of it)."""
    entry = entry.strip().lower()
    if not entry:
        return False
    if entry == "*":
        return True
    host_ip = _ip(host)
    if "/" in entry:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
        return host_ip is not None and host_ip in network
    name, entry_port = entry, ""
    if entry.startswith("[") and "]" in entry:  # [v6] or [v6]:port
        name, _, rest = entry[1:].partition("]")
        entry_port = rest[1:]
    elif entry.count(":") == 1:
        name, entry_port = entry.split(":")
    if entry_port and entry_port != str(port):
        return False
    entry_ip = _ip(name)
    if entry_ip is not None or host_ip is not None:
        return entry_ip == host_ip
    if name.startswith("*."):
        name = name[1:]
    if name.startswith("."):
        return host.endswith(name)
    return host == name or host.endswith("." + name)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    ip = _ip(host)
    return host == "localhost" or (ip is not None and ip.is_loopback)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"message": raw.decode(errors="replace")[:1000]}
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def _parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _backoff(attempt: int, rng: RandomSource = random) -> float:
    base: float = min(0.1 * 2 ** (attempt - 1), 5.0)
    return base * (1 + rng.random())


def _retry_delay(
    status: int, retry_after: str | None, attempt: int, rng: RandomSource = random
) -> float | None:
    """How long to wait before retrying this answer, or None if it must not be retried.

    Like client-go: an answer with Retry-After (429, 503, 504...) is retried after that delay;
    a 429 without it is retried with backoff; other errors are final.
    """
    seconds = _parse_retry_after(retry_after)
    if seconds is not None and (status == 429 or status >= 500):
        return min(seconds, 30.0)
    if status == 429:
        return _backoff(attempt + 1, rng)
    return None
