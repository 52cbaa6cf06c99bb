"""The webhook HTTPS server (upstream's paths; the port is the Configuration's `webhook.port`).

TLS: the caller passes the `ssl_context` to serve with. This package may not import runtime (save
the generic HTTP server this module serves with, runtime/http1server.py), so it neither builds nor
loads contexts: the protocol settings (`tls.minVersion`, `tls.cipherSuites`, HTTP/1.1 by ALPN)
have one owner, runtime/servingtls.py, and the manager hands over a context made there that
follows `<certDir>/tls.crt` and `tls.key` as they are rotated (runtime/tlsreload.py: new
handshakes get the new certificate, open connections and in-flight requests are untouched). A
fixed pair (tests) is `servingtls.pair_context(cert_dir)`.

The one piece of I/O validation needs, looking up PersistentVolumeClaims that a JobSet's
volumeClaimPolicies would create, goes through a lookup function the manager injects; everything
else is the pure `admission` and `pods` modules. Bodies are read with a size limit (8 MiB). A
malformed request (not JSON, or not the shape of an AdmissionReview: `review.malformed` says
which) gets a 400 naming the problem, never a crash (500); a pod the placement decisions still
cannot read is a 400 too.

The manager runs the server on an event loop of its own thread (manager/servers.py): a
handler reads nothing but the review, the injected lookups (safe to read while the main loop
changes the caches behind them) and its own settings.

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
from typing import Any

import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from jobset_controller import api
from jobset_controller.api import FeatureGates
from jobset_controller.api.naming import pvc_name
from jobset_controller.api.placement import POD_MUTATING_WEBHOOK, POD_VALIDATING_WEBHOOK
from jobset_controller.runtime.http1server import Handler, HttpServer, Reply, Request
from jobset_controller.webhook.pods import (
    MUTATE_POD_PATH,
    VALIDATE_POD_PATH,
    FollowerMode,
    Lookups,
    mutate_pod,
    validate_pod,
)
from jobset_controller.webhook.review import Review, malformed, request_of

log = structlog.get_logger("webhook")

MUTATE_PATH = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
VALIDATE_PATH = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
_MAX_BODY = 8 * 1024 * 1024

# (namespace, name) -> the PersistentVolumeClaim, or None if it does not exist. Injected by the
# manager, so this package needs no API client of its own (only runtime/ talks to the API).
ClaimLookup = Callable[[str, str], Awaitable[dict[str, Any] | None]]
# `pods.mutate_pod` or `pods.validate_pod`.
_PodDecision = Callable[[Review, Lookups, FollowerMode], dict[str, Any]]


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


class WebhookServer:
    def __init__(
        self,
        *,
        lookup_claim: ClaimLookup | None,
        features: FeatureGates,
        ssl_context: ssl.SSLContext,
        host: str = "",
        port: int,
        registry: CollectorRegistry | None = None,
        pod_lookups: Lookups | None = None,
        follower_mode: FollowerMode = FollowerMode.REJECT,
    ) -> None:
        """`ssl_context` is served as given (made by runtime/servingtls.py: module docstring);
        `pod_lookups` (the controller's pod and node caches) turn on the pod webhooks;
        `follower_mode` is what they do with a follower whose leader is not bound yet."""
        self._lookup_claim = lookup_claim
        self._pod_lookups = pod_lookups
        self._follower_mode = follower_mode
        self._features = features
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
        server = HttpServer(self._routes, name="webhook", tls=self._ssl_context, max_body=_MAX_BODY)
        await server.start(self._host, self._port)
        self._http, self.port = server, server.port
        log.info("serving admission webhooks", port=self.port)

    def stop_gating(self) -> None:
        """From now on followers whose leader is not bound are refused, as upstream refuses
        them, instead of admitted behind our gate: called at shutdown, since the successor may
        be upstream's controller, which never releases a gate (webhook/pods.py)."""
        self._follower_mode = FollowerMode.REJECT

    @property
    def listening(self) -> bool:
        """The server is bound and answering (what /readyz's webhook check needs)."""
        return self._http is not None

    async def stop(self) -> None:
        server, self._http = self._http, None
        if server is not None:
            await server.stop()

    @staticmethod
    def _review(request: Request) -> Review | Reply:
        """The request's AdmissionReview, or the 400 that says why it is none."""
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return Reply.text("expected an AdmissionReview: the body is not JSON", 400)
        problem = malformed(body)
        if problem is not None:
            return Reply.text(problem, 400)
        review: Review = body
        return review

    @staticmethod
    def _reply(answer: dict[str, Any]) -> Reply:
        return Reply(body=orjson.dumps(answer), content_type="application/json")

    # The JobSet handlers import `admission` (and with it the API models) at their first call,
    # or when the manager's warm-up does once the process is ready: not on the path to /readyz.

    async def _mutate(self, request: Request) -> Reply:
        from jobset_controller.webhook.admission import mutate

        review = self._review(request)
        if isinstance(review, Reply):
            return review
        return self._reply(mutate(review))

    async def _validate(self, request: Request) -> Reply:
        from jobset_controller.webhook.admission import validate

        review = self._review(request)
        if isinstance(review, Reply):
            return review
        inner = request_of(review)
        existing: dict[str, dict[str, Any]] = {}
        if inner.get("operation") == "CREATE":  # only a create's checks read existing claims
            existing = await self._existing_pvcs(inner.get("namespace") or "", inner.get("object"))
        return self._reply(
            validate(review, features=self._features, existing_pvcs=lambda js: existing)
        )

    async def _mutate_pod(self, request: Request) -> Reply:
        return self._pod_answer(request, mutate_pod, POD_MUTATING_WEBHOOK)

    async def _validate_pod(self, request: Request) -> Reply:
        return self._pod_answer(request, validate_pod, POD_VALIDATING_WEBHOOK)

    def _pod_answer(self, request: Request, decide: _PodDecision, webhook: str) -> Reply:
        review = self._review(request)
        if isinstance(review, Reply):
            return review
        assert self._pod_lookups is not None  # the pod routes exist only with lookups
        try:
            answer = decide(review, self._pod_lookups, self._follower_mode)
        except (AttributeError, TypeError, ValueError) as error:
            # A pod whose deeper fields have the wrong JSON types (the API server never sends
            # one): the decisions read it as typed, so this is the client's error, not ours.
            return Reply.text(f"cannot read the pod: {error}", 400)
        self._log_refusal(review, answer, webhook)
        return self._reply(answer)

    @staticmethod
    def _log_refusal(review: Review, answer: dict[str, Any], webhook: str) -> None:
        """A refused or warned pod is logged (the Job controller's event shows it too)."""
        response = answer.get("response") or {}
        if response.get("allowed") and not response.get("warnings"):
            return
        request = request_of(review)
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
        """The claims a new JobSet's volumeClaimPolicies would create that already exist.

        Asked only for a well-formed CREATE review. `lookup_claim` answers a claim the
        controller's PVC cache does not hold without a request (manager/servers.py), so a review
        costs the API server one GET per claim that exists (its spec is compared), not one per
        template: a client posting reviews cannot turn each into thousands of reads."""
        if self._lookup_claim is None or not isinstance(obj, dict) or not namespace:
            return {}
        spec = obj.get("spec")
        if not isinstance(spec, dict) or not spec.get("volumeClaimPolicies"):
            # No claim template: nothing to look up, and no models to build for it (building
            # them here as well as in `validate` was 26 of the handler's 110 us per review of
            # examples/pytorch-workers.yaml, measured in-process).
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
