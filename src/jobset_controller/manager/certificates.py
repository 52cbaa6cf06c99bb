"""Where each served port's certificate comes from, and what keeps it fresh.

Belongs here: the choice, per HTTPS port, between a mounted certificate directory, internal
certificate management and a self-signed fallback. Every context is made by
`runtime.servingtls.server_context` with the Configuration's `tls.minVersion` and
`tls.cipherSuites` (`make_context` below), so no served port can ignore them.

The webhook certificate (docs/operations.md, internal certificate management): with
`internalCertManagement.enable` (the default, like upstream) the rotator keeps the Secret in the
controller's namespace, writes its pair to certDir and injects the CA into the webhook
configurations. It runs on EVERY replica, leader or not, as upstream's does: a standby must serve
admissions with a valid certificate too. Without it the pair must already be in certDir
(cert-manager's Secret mounted there); when it is not, no webhook is served and the controller's
in-memory defaulting and validation stand in. Either way the files are followed on disk, so a
renewed certificate is served without a restart.

The metrics certificate: `metrics.certDir`'s pair, followed on disk; an empty certDir means
controller-runtime's default directory when internal management is off (cert-manager mounts the
metrics Secret there), and otherwise, or when the files are missing, a self-signed certificate
made in memory now (scrapers skip verification).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from jobset_controller.config import Configuration
from jobset_controller.controller.webhookcerts import rotator_settings
from jobset_controller.manager.environment import (
    DEFAULT_METRICS_CERT_DIR,
    DEFAULT_WEBHOOK_CERT_DIR,
    ManagerOptions,
    controller_namespace,
)
from jobset_controller.runtime.certrotator import CertRotator
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.servingtls import has_chain, self_signed_context, server_context
from jobset_controller.runtime.tlsreload import ReloadingTLS

log = structlog.get_logger("manager")


class CertificateError(Exception):
    """A configured certificate directory holds a pair that cannot be loaded."""


def make_context(config: Configuration) -> Callable[[], ssl.SSLContext]:
    """The one builder of server contexts for this process's Configuration."""
    min_version, ciphers = config.tls.min_version, config.tls.cipher_suites
    return lambda: server_context(min_version, ciphers)


@dataclass(frozen=True)
class MetricsTLS:
    """The metrics port's context, and the watcher that follows certDir (None: self-signed)."""

    context: ssl.SSLContext
    watcher: ReloadingTLS | None


def metrics_tls(config: Configuration, *, clock: Clock) -> MetricsTLS:
    """The metrics certificate (module docstring); CertificateError if certDir's pair is bad."""
    configured = config.metrics.cert_dir
    cert_dir = Path(configured) if configured else DEFAULT_METRICS_CERT_DIR
    if (configured or not config.internal_cert_management.enable) and has_chain(cert_dir):
        watcher = ReloadingTLS.in_dir(cert_dir, make_context=make_context(config), clock=clock)
        if not watcher.reload():
            raise CertificateError(f"metrics certificate in {cert_dir} cannot be loaded")
        return MetricsTLS(watcher.context, watcher)
    if configured:
        log.warning(
            "metrics certDir has no tls.crt/tls.key; serving a self-signed certificate",
            cert_dir=configured,
        )
    tls = config.tls
    return MetricsTLS(self_signed_context(tls.min_version, tls.cipher_suites), None)


@dataclass(frozen=True)
class WebhookTLS:
    """The webhook port's certificate, followed on disk, and its rotator when managed here."""

    files: ReloadingTLS
    rotator: CertRotator | None


def webhook_tls(
    options: ManagerOptions, client: KubeClient, *, clock: Clock, rng: RandomSource
) -> WebhookTLS | None:
    """The webhook certificate (module docstring); None when no webhook can be served."""
    config = options.config
    internal = config.internal_cert_management
    cert_dir = (
        Path(config.webhook.cert_dir) if config.webhook.cert_dir else DEFAULT_WEBHOOK_CERT_DIR
    )
    files = ReloadingTLS.in_dir(cert_dir, make_context=make_context(config), clock=clock)
    if not internal.enable:
        if not files.reload():
            log.info("admission webhooks not served: no tls.crt/tls.key", cert_dir=str(cert_dir))
            return None
        return WebhookTLS(files, None)
    settings = rotator_settings(
        namespace=controller_namespace(config.leader_election.resource_namespace),
        service_name=internal.webhook_service_name,
        secret_name=internal.webhook_secret_name,
        cert_dir=cert_dir,
        policy=options.cert_policy,
        extra_sans=options.cert_extra_sans,
    )
    log.info(
        "internal certificate management",
        secret=f"{settings.namespace}/{settings.secret_name}",
        dns_names=list(settings.identity.dns_names),
        cert_dir=str(cert_dir),
    )
    rotator = CertRotator(client, settings, on_files=files.reload, clock=clock, rng=rng)
    return WebhookTLS(files, rotator)
