"""The metrics and health servers: `/metrics` and the probes, each a small HTTP server on the
event loop built on the generic HTTP/1.1 server (runtime/http1server.py). The admission
webhook's server is webhook/server.py; the API client's connections are runtime/http1client.py.

- `MetricsServer` serves `/metrics` in the Prometheus text format from the `CollectorRegistry`
  it is given (never the global one).
- `HealthServer` serves liveness (`/healthz`) and readiness (`/readyz`), names configurable as
  upstream's `health.livenessEndpointName` / `readinessEndpointName`. Each endpoint runs its
  registered checks: 200 "ok" when all pass, else 500 with one line per check, `[+]name ok` or
  `[-]name failed`, like controller-runtime's healthz handler. `/<endpoint>/<check>` runs one
  check; `?verbose` lists every check on success too. No check registered means healthy.
  A check is a plain function returning True when healthy; returning False or raising fails it
  (the exception text is logged, never served).

Bind addresses use Go's syntax, as upstream's flags do: ":<port>" (all interfaces), "host:port",
"[::1]:8080"; port 0 picks a free port (read it from `.port` after `start()`); "0" or "" means
disabled, and `start()` then does nothing.

Security of /metrics, as upstream's: with `tls` (a server `SSLContext`, see `servingtls`) it is
HTTPS, and with `auth` (see `metricsauth`) every request must carry a bearer token the API server
authenticates and authorises for `get` on the non-resource URL `/metrics`; refusals are 401, 403
or 500 with a one-line reason, and nothing of the request (headers, token) is logged. Without
both it is plain HTTP for anyone who can reach the port (`--metrics-secure=false`, for a
sidecar proxy or local runs). The health probes are plain HTTP, as upstream's.

Handlers run on the event loop: a blocked loop makes probes time out, which is the signal a
liveness probe should give. Access logs are off (probes would flood them).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from typing import Final, Protocol

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from jobset_controller.runtime.http1server import (
    AcceptErrors,
    Handler,
    HttpServer,
    Reply,
    Request,
    not_found,
)

log = structlog.get_logger("httpserver")

HealthCheck = Callable[[], bool]


class AcceptErrorsCollector(Collector):
    """``jobset_server_accept_errors_total{server,errno}`` from the servers' process-wide count
    (http1server.ACCEPT_ERRORS): the manager registers one in each registry it serves. Named as
    controller-runtime and client-go name their counters: ``<namespace>_<subsystem>_<what>_total``.
    """

    name: Final = "jobset_server_accept_errors_total"

    def __init__(self, errors: AcceptErrors) -> None:
        self._errors = errors

    def describe(self) -> Iterator[CounterMetricFamily]:
        """The family without samples: lets a registry refuse a second collector of the name."""
        yield self._family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = self._family()
        for (server, code), count in self._errors.counts():
            family.add_metric((server, code), count)
        yield family

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(
            self.name.removesuffix("_total"),
            "Connections a server could not accept for lack of file descriptors or kernel memory "
            "(it backs off 5 ms doubling to 1 s, and serves open connections meanwhile).",
            labels=("server", "errno"),
        )


class Verdict(Protocol):
    """What an authoriser answers: the status to refuse with, or 200 to serve."""

    @property
    def status(self) -> int: ...

    @property
    def message(self) -> str: ...


class RequestAuth(Protocol):
    """Decides whether a request may be served (`metricsauth.DelegatingAuth` is one)."""

    async def decide(self, authorization: str | None, method: str, path: str) -> Verdict: ...


DISABLED: Final = frozenset({"", "0"})


def parse_bind_address(address: str) -> tuple[str | None, int] | None:
    """Go's "host:port" -> (host, port); host None means all interfaces; None means disabled."""
    address = address.strip()
    if address in DISABLED:
        return None
    host, separator, port_text = address.rpartition(":")
    if not separator or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f'invalid bind address "{address}" (want "host:port", ":port" or "0")')
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or None, int(port_text))


class _Server:
    """One HTTP server on one address; started and stopped by the manager."""

    def __init__(
        self,
        bind_address: str,
        routes: dict[str, dict[str, Handler]],
        name: str,
        tls: ssl.SSLContext | None = None,
        fallback: Handler | None = None,
    ) -> None:
        self.bind_address = bind_address
        self._target = parse_bind_address(bind_address)
        self._name = name
        self._tls = tls
        self._http = HttpServer(routes, name=name, tls=tls, fallback=fallback)
        self.port: int | None = None  # the port actually bound, once started

    @property
    def enabled(self) -> bool:
        return self._target is not None

    async def start(self) -> None:
        """Bind and serve. Does nothing when disabled; raises OSError if the port is taken."""
        if self._target is None or self._http.serving:
            return
        host, port = self._target
        await self._http.start(host, port)
        self.port = self._http.port
        log.info(
            "serving",
            server=self._name,
            address=self.bind_address,
            port=self.port,
            scheme="https" if self._tls is not None else "http",
        )

    async def stop(self) -> None:
        """Stop serving; safe to call when not started."""
        await self._http.stop()


class MetricsServer(_Server):
    """`GET /metrics`: everything in `registry`, in prometheus_client's latest text format.

    With prometheus_client 0.26 that is text format 1.0.0 (`text/plain; version=1.0.0`), which
    Prometheus 2 and 3 both parse as the classic text format. `tls` makes it HTTPS; `auth` makes
    every request pass its decision first (module docstring).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        bind_address: str,
        *,
        tls: ssl.SSLContext | None = None,
        auth: RequestAuth | None = None,
    ) -> None:
        self._registry = registry
        self._auth = auth
        super().__init__(bind_address, {"/metrics": {"GET": self._metrics}}, "metrics", tls)

    @property
    def secure(self) -> bool:
        """HTTPS with every request authenticated and authorised."""
        return self._tls is not None and self._auth is not None

    async def _metrics(self, request: Request) -> Reply:
        if self._auth is not None:
            verdict = await self._auth.decide(
                request.headers.get("authorization"), request.method, request.path
            )
            if verdict.status != 200:
                return Reply.text(verdict.message + "\n", verdict.status)
        return Reply(body=generate_latest(self._registry), content_type=CONTENT_TYPE_LATEST)


class HealthServer(_Server):
    """Liveness and readiness endpoints, each the conjunction of its named checks."""

    def __init__(
        self,
        bind_address: str,
        *,
        readiness_endpoint_name: str = "readyz",
        liveness_endpoint_name: str = "healthz",
    ) -> None:
        self._liveness: dict[str, HealthCheck] = {}
        self._readiness: dict[str, HealthCheck] = {}
        routes: dict[str, dict[str, Handler]] = {}
        self._by_check: dict[str, Handler] = {}  # "/<endpoint>/" -> the handler of one check
        for endpoint, checks in (
            (liveness_endpoint_name, self._liveness),
            (readiness_endpoint_name, self._readiness),
        ):
            endpoint = endpoint.strip("/")
            handler = _handler(endpoint, checks)
            routes[f"/{endpoint}"] = {"GET": handler}
            self._by_check[f"/{endpoint}/"] = handler
        super().__init__(bind_address, routes, "health", fallback=self._one_check)

    async def _one_check(self, request: Request) -> Reply:
        """`/<endpoint>/<check>`: the endpoint's handler runs that check alone."""
        prefix, _, check = request.path.rpartition("/")
        handler = self._by_check.get(prefix + "/")
        if handler is None or not check or request.method != "GET":
            return await not_found(request)
        return await handler(request)

    def add_liveness_check(self, name: str, check: HealthCheck) -> None:
        """Add (or replace) a check the process must pass to be kept alive."""
        self._liveness[name] = check

    def add_readiness_check(self, name: str, check: HealthCheck) -> None:
        """Add (or replace) a check the process must pass to be sent traffic."""
        self._readiness[name] = check


def _passes(name: str, check: HealthCheck) -> bool:
    try:
        return bool(check())
    except Exception as error:
        log.warning("health check raised", check=name, error=str(error))
        return False


def _handler(endpoint: str, checks: dict[str, HealthCheck]) -> Handler:
    async def handle(request: Request) -> Reply:
        only = request.path.rpartition("/")[2] if request.path != f"/{endpoint}" else None
        if only is not None and only not in checks:
            return Reply.text(f"no check named {only}\n", 404)
        selected = {only: checks[only]} if only is not None else dict(checks)
        results = {name: _passes(name, check) for name, check in selected.items()}
        lines = [f"[+]{name} ok" if ok else f"[-]{name} failed" for name, ok in results.items()]
        if not all(results.values()):
            failed = [name for name, ok in results.items() if not ok]
            log.info("health check failed", endpoint=endpoint, failed=failed)
            return Reply.text("\n".join([*lines, f"{endpoint} check failed\n"]), 500)
        if any(part.partition("=")[0] == "verbose" for part in request.query.split("&")):
            return Reply.text("\n".join([*lines, f"{endpoint} check passed\n"]))
        return Reply.text("ok")

    return handle
