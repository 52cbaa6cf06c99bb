"""JobSet's names for its internal certificate management (the generic part is runtime.certrotator).

Upstream hard-codes the two webhook configuration names and the CA's subject, and its install
manifests and Helm chart use the same literal configuration names; keeping them lets our
controller replace upstream's in place (and lets RBAC grant the configurations by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from jobset_controller.runtime.certrotator import RotatorSettings
from jobset_controller.runtime.certs import CertPolicy, Identity, split_sans
from jobset_controller.runtime.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)

MUTATING_WEBHOOK_CONFIGURATION: Final = "jobset-mutating-webhook-configuration"
VALIDATING_WEBHOOK_CONFIGURATION: Final = "jobset-validating-webhook-configuration"
CA_COMMON_NAME: Final = "jobset-ca"
CA_ORGANIZATION: Final = "jobset"


def serving_dns_names(service: str, namespace: str) -> tuple[str, str]:
    """The names the API server dials the webhook Service by (with and without the cluster
    domain, as a cert-manager Certificate for it would list them)."""
    return f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"


def rotator_settings(
    *,
    namespace: str,
    service_name: str,
    secret_name: str,
    cert_dir: Path,
    policy: CertPolicy,
    extra_sans: Sequence[str] = (),
) -> RotatorSettings:
    """What JobSet's rotator keeps: its Secret, its Service's names, its two configurations."""
    extra_dns, extra_ips = split_sans(extra_sans)
    return RotatorSettings(
        namespace=namespace,
        secret_name=secret_name,
        identity=Identity(
            ca_common_name=CA_COMMON_NAME,
            ca_organization=CA_ORGANIZATION,
            dns_names=(*serving_dns_names(service_name, namespace), *extra_dns),
            ip_addresses=extra_ips,
        ),
        cert_dir=cert_dir,
        webhook_configurations=(
            (MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_WEBHOOK_CONFIGURATION),
            (VALIDATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATION),
        ),
        policy=policy,
    )
