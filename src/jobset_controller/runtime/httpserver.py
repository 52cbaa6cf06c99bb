"""The metrics endpoint and the health probes, as small aiohttp servers on the event loop.

- `MetricsServer` serves `/metrics` in the Prometheus text format from the `CollectorRegistry`
  it is given (never the global one).
- `HealthServer` serves liveness (`/healthz`) and readiness (`/readyz`), names configurable as
  upstream's `health.livenessEndpointName` / `readinessEndpointName`. Each endpoint runs its
  registered checks: 200 "ok" when all pass, else 500 with one line per check, `[+]name ok` or
  `[-]name failed`, like controller-runtime's healthz handler. `/<endpoint>/<check>` runs one
  check; `?verbose` lists every check on success too. No check registered means healthy.
  A check is a plain function returning True when healthy; returning False or raising fails it
  (the exception text is logged, never served).

Bind addresses use Go's syntax, as upstream's flags do: ":8081" (all interfaces), "host:port",
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
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = structlog.get_logger("httpserver")

HealthCheck = Callable[[], bool]


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
    """One aiohttp app on one address; started and stopped by the manager."""

    def __init__(
        self,
        bind_address: str,
        app: web.Application,
        name: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.bind_address = bind_address
        self._target = parse_bind_address(bind_address)
        self._app = app
        self._name = name
        self._tls = tls
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the port actually bound, once started

    @property
    def enabled(self) -> bool:
        return self._target is not None

    async def start(self) -> None:
        """Bind and serve. Does nothing when disabled; raises OSError if the port is taken."""
        if self._target is None or self._runner is not None:
            return
        host, port = self._target
        runner = web.AppRunner(self._app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port, ssl_context=self._tls).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info(
            "serving",
            server=self._name,
            address=self.bind_address,
            port=self.port,
            scheme="https" if self._tls is not None else "http",
        )

    async def stop(self) -> None:
        """Stop serving; safe to call when not started."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


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
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        super().__init__(bind_address, app, "metrics", tls)

    @property
    def secure(self) -> bool:
        """HTTPS with every request authenticated and authorised."""
        return self._tls is not None and self._auth is not None

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._auth is not None:
            verdict = await self._auth.decide(
                request.headers.get("Authorization"), request.method, request.path
            )
            if verdict.status != 200:
                return web.Response(status=verdict.status, text=verdict.message + "\n")
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


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
        app = web.Application()
        for endpoint, checks in (
            (liveness_endpoint_name, self._liveness),
            (readiness_endpoint_name, self._readiness),
        ):
            endpoint = endpoint.strip("/")
            app.router.add_get(f"/{endpoint}", _handler(endpoint, checks))
            app.router.add_get(f"/{endpoint}/{{check}}", _handler(endpoint, checks))
        super().__init__(bind_address, app, "health")

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


def _handler(
    endpoint: str, checks: dict[str, HealthCheck]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        only = request.match_info.get("check")
        if only is not None and only not in checks:
            return web.Response(status=404, text=f"no check named {only}\n")
        selected = {only: checks[only]} if only is not None else dict(checks)
        results = {name: _passes(name, check) for name, check in selected.items()}
        lines = [f"[+]{name} ok" if ok else f"[-]{name} failed" for name, ok in results.items()]
        if not all(results.values()):
            failed = [name for name, ok in results.items() if not ok]
            log.info("health check failed", endpoint=endpoint, failed=failed)
            return web.Response(status=500, text="\n".join([*lines, f"{endpoint} check failed\n"]))
        if "verbose" in request.query:
            return web.Response(text="\n".join([*lines, f"{endpoint} check passed\n"]))
        return web.Response(text="ok")

    return handle
