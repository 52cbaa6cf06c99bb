"""What the process is told and where it runs: its options, its namespaces, its identity.

Belongs here: everything the other manager modules read about the environment, decided once
(flags merged over the Configuration by `cli`, the pod's namespace from the downward API or the
ServiceAccount file, the Lease identity). Nothing here opens a connection or a port.

Every default has one owner: the Configuration's model (`config.py`) for upstream's keys and
ours alike. An option left `None` here means "the Configuration's value", so no default is
written twice.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from jobset_controller import __version__
from jobset_controller.api.constants import FIELD_MANAGER
from jobset_controller.config import (
    CA_VALIDITY,
    CACHE_SYNC_TIMEOUT,
    CERT_LOOKAHEAD,
    CERT_VALIDITY,
    DEPOSED_EVENT_FLUSH_TIMEOUT,
    EVENT_FLUSH_TIMEOUT,
    POD_WORKERS,
    SHUTDOWN_TIMEOUT,
    WORKERS,
    Configuration,
    parse_duration,
)
from jobset_controller.runtime.certs import CertPolicy

T = TypeVar("T")

# Go's names for the machine types Python reports differently (User-Agent's `<os>/<arch>`, the
# build info metric's `arch`): the names images and nodes use (`kubernetes.io/arch`).
_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "i686": "386", "armv7l": "arm"}


def go_arch() -> str:
    """This machine's architecture as Go and Kubernetes name it (`amd64`, `arm64`, `s390x`)."""
    machine = platform.machine().lower()
    return _GO_ARCH.get(machine, machine)


def user_agent(purpose: str = "") -> str:
    """The User-Agent of the controller's API clients: `jobset/<version> (<os>/<arch>)
    jobset-controller[ <purpose>]`.

    Why it starts with upstream's word: the API server records a write that names no
    fieldManager under the User-Agent's text before its first "/", and upstream's controller
    sends none either, so every create, update, patch and status write of ours appears in
    managedFields under `api.constants.FIELD_MANAGER`, as upstream's do. What follows the
    version says which controller it is (audit logs) and, with `purpose`, which client.
    """
    tail = f" {purpose}" if purpose else ""
    return f"{FIELD_MANAGER}/{__version__} ({sys.platform}/{go_arch()}) jobset-controller{tail}"


_SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# controller-runtime's default certificate directories (where cert-manager's Secrets are mounted).
DEFAULT_WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
DEFAULT_METRICS_CERT_DIR = Path("/tmp/k8s-metrics-server/serving-certs")


@dataclass(frozen=True)
class ManagerOptions:
    """Everything `Manager.run` needs. `cli` merges the flags given over the Configuration; an
    override left `None` reads the Configuration's value (the `effective_*` properties)."""

    config: Configuration
    kubeconfig: str | None = None
    metrics_bind_address: str | None = None
    # HTTPS with TokenReview + SubjectAccessReview on every request (upstream's only mode);
    # False serves plain HTTP to anyone (`--metrics-secure=false`).
    metrics_secure: bool = True
    health_probe_bind_address: str | None = None
    leader_elect: bool | None = None
    qps: float | None = None
    burst: int | None = None
    workers: int = WORKERS
    pod_workers: int = POD_WORKERS
    cache_sync_timeout: float = CACHE_SYNC_TIMEOUT
    shutdown_timeout: float = SHUTDOWN_TIMEOUT
    event_flush_timeout: float = EVENT_FLUSH_TIMEOUT
    deposed_event_flush_timeout: float = DEPOSED_EVENT_FLUSH_TIMEOUT
    # Internal certificate management: lifetimes and lookahead (upstream's by default), and
    # names the serving certificate carries besides the Service's (e.g. 127.0.0.1 when an API
    # server on the same host calls the webhook by URL, as in tests).
    cert_policy: CertPolicy = field(default_factory=lambda: default_cert_policy())
    cert_extra_sans: tuple[str, ...] = ()
    # `--early-job-conditions` (ours), over `earlyJobConditions.enable`.
    early_job_conditions: bool | None = None

    @property
    def effective_metrics_bind_address(self) -> str:
        return _pick(self.metrics_bind_address, self.config.metrics.bind_address)

    @property
    def effective_health_probe_bind_address(self) -> str:
        return _pick(self.health_probe_bind_address, self.config.health.health_probe_bind_address)

    @property
    def effective_leader_elect(self) -> bool:
        return _pick(self.leader_elect, self.config.leader_election.leader_elect)

    @property
    def effective_qps(self) -> float:
        return _pick(self.qps, self.config.client_connection.qps)

    @property
    def effective_burst(self) -> int:
        return _pick(self.burst, self.config.client_connection.burst)

    @property
    def effective_early_job_conditions(self) -> bool:
        return _pick(self.early_job_conditions, self.config.early_job_conditions.enable)


def default_cert_policy() -> CertPolicy:
    """Internal certificate management's lifetimes as config.py sets them."""
    return CertPolicy(
        ca_validity=timedelta(seconds=parse_duration(CA_VALIDITY)),
        cert_validity=timedelta(seconds=parse_duration(CERT_VALIDITY)),
        lookahead=timedelta(seconds=parse_duration(CERT_LOOKAHEAD)),
    )


def _pick(override: T | None, configured: T) -> T:
    return configured if override is None else override


def new_identity() -> str:
    """The Lease holder and Event reporting instance: unique per process, like client-go's
    `<hostname>_<uuid>`."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _pod_namespace() -> str:
    """POD_NAMESPACE (the manifests set it from the downward API), else the service-account
    namespace file; "" outside a cluster."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return _SA_NAMESPACE_FILE.read_text().strip()
    except OSError:
        return ""


def leader_election_namespace(configured: str) -> str:
    """Configured value, else the pod's namespace, else `default` (running outside a cluster)."""
    return configured or _pod_namespace() or "default"


def controller_namespace(leader_election_configured: str) -> str:
    """Where the webhook certificate Secret lives: the pod's own namespace (where its Deployment
    and Secret are installed), else, outside a cluster, the configured leader-election namespace,
    else `default`. In a cluster it is the same answer as upstream's (the service-account file)."""
    return _pod_namespace() or leader_election_configured or "default"
