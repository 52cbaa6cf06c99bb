"""The webhook HTTPS server (upstream's paths, port 9443 by default).

TLS material is read from `<certDir>/tls.crt` and `tls.key` (controller-runtime's layout, what
cert-manager or a mounted Secret provides). The one piece of I/O validation needs, looking up
PersistentVolumeClaims that a JobSet's volumeClaimPolicies would create, goes through a lookup
function the manager injects; everything else is the pure `admission` module. Bodies are read
with a size limit; a malformed request gets a 400, never a crash.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import structlog
from aiohttp import web

from jobset_controller.api import FeatureGates, JobSet
from jobset_controller.api.naming import pvc_name
from jobset_controller.webhook.admission import mutate, validate

log = structlog.get_logger("webhook")

MUTATE_PATH = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"
VALIDATE_PATH = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
_MAX_BODY = 8 * 1024 * 1024

# (namespace, name) -> the PersistentVolumeClaim, or None if it does not exist. Injected by the
# manager, so this package needs no API client of its own (only runtime/ talks to the API).
ClaimLookup = Callable[[str, str], Awaitable[dict[str, Any] | None]]


def tls_context(cert_dir: Path) -> ssl.SSLContext:
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
        cert_dir: Path,
        host: str = "",
        port: int = 9443,
    ) -> None:
        self._lookup_claim = lookup_claim
        self._features = features
        self._cert_dir = cert_dir
        self._host = host or None
        self._port = port
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post(MUTATE_PATH, self._mutate)
        app.router.add_post(VALIDATE_PATH, self._validate)
        self._app = app

    async def start(self) -> None:
        runner = web.AppRunner(self._app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port, ssl_context=tls_context(self._cert_dir))
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("serving admission webhooks", port=self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @staticmethod
    async def _review(request: web.Request) -> dict[str, Any] | None:
        try:
            body = orjson.loads(await request.read())
        except (orjson.JSONDecodeError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    @staticmethod
    def _reply(answer: dict[str, Any]) -> web.Response:
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def _mutate(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        if review is None:
            return web.Response(status=400, text="expected an AdmissionReview")
        return self._reply(mutate(review))

    async def _validate(self, request: web.Request) -> web.Response:
        review = await self._review(request)
        if review is None:
            return web.Response(status=400, text="expected an AdmissionReview")
        inner = review.get("request") or {}
        existing = await self._existing_pvcs(inner.get("namespace", ""), inner.get("object"))
        return self._reply(
            validate(review, features=self._features, existing_pvcs=lambda js: existing)
        )

    async def _existing_pvcs(self, namespace: str, obj: Any) -> dict[str, dict[str, Any]]:
        """The claims a new JobSet's volumeClaimPolicies would create that already exist."""
        if self._lookup_claim is None or not isinstance(obj, dict) or not namespace:
            return {}
        try:
            js = JobSet.model_validate(obj)
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
