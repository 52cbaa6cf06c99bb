"""The webhook HTTPS server (upstream's paths, port 9443 by default).

TLS: the manager passes an `ssl_context` that follows `<certDir>/tls.crt` and `tls.key` as they
are rotated (runtime.tlsreload: new handshakes get the new certificate, open connections and
in-flight requests are untouched); this package may not import runtime (save the generic HTTP
server this module serves with, runtime/http1server.py), so it only holds the context.
`cert_dir` instead loads the pair once (tests with a fixed certificate).

The one piece of I/O validation needs, looking up PersistentVolumeClaims that a JobSet's
volumeClaimPolicies would create, goes through a lookup function the manager injects; everything
else is the pure `admission` module. Bodies are read with a size limit (8 MiB); a malformed request
gets a 400, never a crash.

Every request to a webhook path is measured under controller-runtime's metric names, so its
dashboards work unchanged: `controller_runtime_webhook_requests_total{webhook, code}` (the path
and the HTTP status code), `controller_runtime_webhook_latency_seconds{webhook}` (from the
request's arrival to the answer) and `controller_runtime_webhook_requests_in_flight{webhook}`,
on the registry the manager passes in (none: not measured).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from jobset_controller import api
from jobset_controller.api import FeatureGates
from jobset_controller.api.naming import pvc_name
from jobset_controller.runtime.http1server import Handler, HttpServer, Reply, Request
from jobset_controller.webhook.pods import (
    MUTATE_POD_PATH,
    VALIDATE_POD_PATH,
    FollowerMode,
    Lookups,
    mutate_pod,
    validate_pod,
)

log = structlog.get_logger("webhook")

MUTATE_PATH = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
VALIDATE_PATH = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
_MAX_BODY = 8 * 1024 * 1024

# (namespace, name) -> the PersistentVolumeClaim, or None if it does not exist. Injected by the
# manager, so this package needs no API client of its own (only runtime/ talks to the API).
ClaimLookup = Callable[[str, str], Awaitable[dict[str, Any] | None]]


# Go client_golang's default buckets, which controller-runtime's webhook latency histogram uses.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class WebhookMetrics:
    """controller-runtime's three webhook metrics, labelled by the webhook's path."""

    def __init__(self, registry: CollectorRegistry, paths: tuple[str, ...]) -> None:
        self.requests = Counter(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=registry,
        )
        for path in paths:  # present from the start, so a dashboard sees 0, not "no data"
            self.in_flight.labels(path)
            self.latency.labels(path)

    def measured(self, path: str, handler: Handler) -> Handler:
        """`handler` with every request to it measured (a handler that raises counts as 500)."""
        in_flight = self.in_flight.labels(path)
        latency = self.latency.labels(path)

        async def measure(request: Request) -> Reply:
            started = time.perf_counter()
            in_flight.inc()
            code = 500
            try:
                reply = await handler(request)
                code = reply.status
                return reply
            finally:
                in_flight.dec()
                latency.observe(time.perf_counter() - started)
                self.requests.labels(path, str(code)).inc()

        return measure


def tls_context(cert_dir: Path) -> ssl.SSLContext:
    """A context serving the pair in `cert_dir` as it is now (never reloaded)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_dir / "tls.crt"), str(cert_dir / "tls.key"))
    return context


class WebhookServer:
    def __init__(
        self,
        *,
        lookup_claim: ClaimLookup | None,
        features: FeatureGates,
        cert_dir: Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        host: str = "",
        port: int = 9443,
        registry: CollectorRegistry | None = None,
        pod_lookups: Lookups | None = None,
        follower_mode: FollowerMode = FollowerMode.REJECT,
    ) -> None:
        """`pod_lookups` (the controller's pod and node caches) turn on the pod webhooks;
        `follower_mode` is what they do with a follower whose leader is not bound yet."""
        self._lookup_claim = lookup_claim
        self._pod_lookups = pod_lookups
        self._follower_mode = follower_mode
        self._features = features
        if (cert_dir is None) == (ssl_context is None):
            raise ValueError("give exactly one of cert_dir and ssl_context")
        self._cert_dir = cert_dir
        self._ssl_context = ssl_context
        self._host = host or None
        self._port = port
        self._http: HttpServer | None = None
        self.port: int | None = None
        handlers: dict[str, Handler] = {MUTATE_PATH: self._mutate, VALIDATE_PATH: self._validate}
        if pod_lookups is not None:
            handlers[MUTATE_POD_PATH] = self._mutate_pod
            handlers[VALIDATE_POD_PATH] = self._validate_pod
        if registry is not None:
            metrics = WebhookMetrics(registry, tuple(handlers))
            handlers = {path: metrics.measured(path, h) for path, h in handlers.items()}
        self._routes = {path: {"POST": handler} for path, handler in handlers.items()}

    async def start(self) -> None:
        context = self._ssl_context
        if context is None:
            assert self._cert_dir is not None
            context = tls_context(self._cert_dir)
        server = HttpServer(self._routes, name="webhook", tls=context, max_body=_MAX_BODY)
        await server.start(self._host, self._port)
        self._http, self.port = server, server.port
        log.info("serving admission webhooks", port=self.port)

    @property
    def listening(self) -> bool:
        """The server is bound and answering (what /readyz's webhook check needs)."""
        return self._http is not None

    async def stop(self) -> None:
        server, self._http = self._http, None
        if server is not None:
            await server.stop()

    @staticmethod
    def _review(request: Request) -> dict[str, Any] | None:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return None
        return body if isinstance(body, dict) else None

    @staticmethod
    def _reply(answer: dict[str, Any]) -> Reply:
        return Reply(body=orjson.dumps(answer), content_type="application/json")

    # The JobSet handlers import `admission` (and with it the API models) at their first call,
    # or when the manager's warm-up does once the process is ready: not on the path to /readyz.

    async def _mutate(self, request: Request) -> Reply:
        from jobset_controller.webhook.admission import mutate

        review = self._review(request)
        if review is None:
            return Reply.text("expected an AdmissionReview", 400)
        return self._reply(mutate(review))

    async def _validate(self, request: Request) -> Reply:
        from jobset_controller.webhook.admission import validate

        review = self._review(request)
        if review is None:
            return Reply.text("expected an AdmissionReview", 400)
        inner = review.get("request") or {}
        existing = await self._existing_pvcs(inner.get("namespace", ""), inner.get("object"))
        return self._reply(
            validate(review, features=self._features, existing_pvcs=lambda js: existing)
        )

    async def _mutate_pod(self, request: Request) -> Reply:
        review = self._review(request)
        if review is None or self._pod_lookups is None:
            return Reply.text("expected an AdmissionReview", 400)
        answer = mutate_pod(review, self._pod_lookups, self._follower_mode)
        self._log_refusal(review, answer, "mpod.kb.io")
        return self._reply(answer)

    async def _validate_pod(self, request: Request) -> Reply:
        review = self._review(request)
        if review is None or self._pod_lookups is None:
            return Reply.text("expected an AdmissionReview", 400)
        answer = validate_pod(review, self._pod_lookups, self._follower_mode)
        self._log_refusal(review, answer, "vpod.kb.io")
        return self._reply(answer)

    @staticmethod
    def _log_refusal(review: dict[str, Any], answer: dict[str, Any], webhook: str) -> None:
        """A refused or warned pod is logged (the Job controller's event shows it too)."""
        response = answer.get("response") or {}
        if response.get("allowed") and not response.get("warnings"):
            return
        request = review.get("request") or {}
        obj = request.get("object") or {}
        log.info(
            "pod admission",
            webhook=webhook,
            namespace=request.get("namespace"),
            pod=(obj.get("metadata") or {}).get("generateName") or request.get("name"),
            allowed=response.get("allowed"),
            reason=(response.get("status") or {}).get("message") or response.get("warnings"),
        )

    async def _existing_pvcs(self, namespace: str, obj: Any) -> dict[str, dict[str, Any]]:
        """The claims a new JobSet's volumeClaimPolicies would create that already exist."""
        if self._lookup_claim is None or not isinstance(obj, dict) or not namespace:
            return {}
        try:
            js = api.JobSet.model_validate(obj)
        except ValueError:
            return {}
        found: dict[str, dict[str, Any]] = {}
        name = js.metadata.name or ""
        for policy in js.spec.volume_claim_policies:
            for template in policy.templates:
                claim = pvc_name(template.metadata.name or "", name)
                existing = await self._lookup_claim(namespace, claim)
                if existing is not None:
                    found[claim] = existing
        return found
