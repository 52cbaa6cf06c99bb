"""The controller's Configuration file (config.jobset.x-k8s.io/v1alpha1, kind Configuration).

Decoding is strict, like upstream's: an unknown key is an error that names it, so a typo cannot
silently leave a default in force. Durations use Go's syntax ("15s", "1m30s"). Command-line flags
override file values only when given (upstream's rule), which `apply_flag_overrides` implements.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jobset_controller.runtime.ciphers import openssl_cipher_list

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(ValueError):
    """A bad Configuration file or flag; the message names the key and the reason."""


def parse_duration(value: Any) -> float:
    """Go duration string (or a number of seconds) -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"invalid duration {value!r}")
    text, total, pos = value.strip(), 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f'invalid duration "{value}" (use Go syntax, e.g. "15s")')
    return total


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class LeaderElection(_Strict):
    leader_elect: bool = Field(True, alias="leaderElect")
    resource_name: str = Field("6d4f6a47.jobset.x-k8s.io", alias="resourceName")
    resource_lock: Literal["leases"] = Field("leases", alias="resourceLock")
    resource_namespace: str = Field("", alias="resourceNamespace")
    lease_duration: float = Field(15.0, alias="leaseDuration")
    renew_deadline: float = Field(10.0, alias="renewDeadline")
    retry_period: float = Field(2.0, alias="retryPeriod")

    @field_validator("lease_duration", "renew_deadline", "retry_period", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class Webhook(_Strict):
    port: int = 9443
    host: str = ""
    cert_dir: str = Field("", alias="certDir")


class Metrics(_Strict):
    bind_address: str = Field(":8443", alias="bindAddress")
    cert_dir: str = Field("", alias="certDir")


class Health(_Strict):
    health_probe_bind_address: str = Field(":8081", alias="healthProbeBindAddress")
    readiness_endpoint_name: str = Field("readyz", alias="readinessEndpointName")
    liveness_endpoint_name: str = Field("healthz", alias="livenessEndpointName")


class InternalCertManagement(_Strict):
    enable: bool = True
    webhook_service_name: str = Field("jobset-webhook-service", alias="webhookServiceName")
    webhook_secret_name: str = Field("jobset-webhook-server-cert", alias="webhookSecretName")


class ClientConnection(_Strict):
    qps: float = 500.0
    burst: int = 500


class TLS(_Strict):
    min_version: Literal["", "VersionTLS12", "VersionTLS13"] = Field("", alias="minVersion")
    cipher_suites: tuple[str, ...] = Field((), alias="cipherSuites")


class ExclusivePlacement(_Strict):
    """Ours (upstream has no such key): what the pod webhooks do with a follower created before
    its leader is bound. `Gate` admits it behind a scheduling gate that the pod controller lifts
    once the leader is bound; `Reject` refuses the create as upstream does (the Job controller
    retries with backoff). Reject is the default: the placement benchmark (README) measured it
    faster on the local cluster (the Job controller creates index 0 first, so few followers are
    refused); Gate trades that speed for zero refused creates."""

    followers: Literal["Gate", "Reject"] = "Reject"


class Configuration(_Strict):
    api_version: Literal["config.jobset.x-k8s.io/v1alpha1"] = Field(
        "config.jobset.x-k8s.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["Configuration"] = "Configuration"
    webhook: Webhook = Webhook()
    leader_election: LeaderElection = Field(LeaderElection(), alias="leaderElection")
    metrics: Metrics = Metrics()
    health: Health = Health()
    internal_cert_management: InternalCertManagement = Field(
        InternalCertManagement(), alias="internalCertManagement"
    )
    client_connection: ClientConnection = Field(ClientConnection(), alias="clientConnection")
    feature_gates: dict[str, bool] = Field(default_factory=dict, alias="featureGates")
    tls: TLS = TLS()
    exclusive_placement: ExclusivePlacement = Field(
        ExclusivePlacement(), alias="exclusivePlacement"
    )


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<root>"


def load_configuration(path: str | Path | None) -> Configuration:
    """Read and strictly decode the file; no path means built-in defaults."""
    if not path:
        return Configuration()
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as error:
        raise ConfigError(f"--config {path}: cannot read: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"--config {path}: not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping at the top level")
    try:
        config = Configuration.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        reason = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(f"--config {path}: {_location(first['loc'])}: {reason}") from error
    if config.tls.min_version == "VersionTLS13" and config.tls.cipher_suites:
        raise ConfigError(
            f"--config {path}: tls.cipherSuites: may not be specified when minVersion is "
            "'VersionTLS13'"
        )
    try:
        openssl_cipher_list(config.tls.cipher_suites)
    except ValueError as error:
        raise ConfigError(f"--config {path}: tls.cipherSuites: {error}") from None
    return config
