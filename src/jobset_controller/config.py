"""The controller's Configuration file (config.jobset.x-k8s.io/v1alpha1, kind Configuration).

Decoding is strict, like upstream's: an unknown key is an error that names it, so a typo cannot
silently leave a default in force. Durations use Go's syntax ("15s", "1m30s"). Command-line flags
override file values only when given (upstream's rule; `cli.py` merges them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jobset_controller.runtime.ciphers import openssl_cipher_list

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


# Ours, not keys of upstream's file (upstream runs one worker per controller and has no such
# knobs): the defaults of the flags and options that set them, owned here like every default.
WORKERS = 4  # JobSet reconciles at once (`--workers`); 4 creates Jobs 2.5x faster (hack/bench)
POD_WORKERS = 2  # the pod controller of exclusive placement
CACHE_SYNC_TIMEOUT = 120.0  # seconds, controller-runtime's CacheSyncTimeout
SHUTDOWN_TIMEOUT = 20.0  # seconds for in-flight reconciles to finish after SIGTERM
EVENT_FLUSH_TIMEOUT = 5.0  # seconds to write buffered Events at exit (20 + 5 < 30 s grace)
# Seconds a leader that lost its Lease keeps writing the Events it holds before it exits 1: the
# Event recorder's retry horizon (runtime/events.py WRITE_RETRY_DELAYS, about 45 s). No grace
# period bounds this exit (the process ends itself), and a Lease is most often lost because the
# API server is away, so a shorter flush would drop the Events of the last transitions.
DEPOSED_EVENT_FLUSH_TIMEOUT = 45.0
# Internal certificate management's lifetimes (`--webhook-ca-validity`, `--webhook-cert-validity`,
# `--webhook-cert-lookahead`; Go durations): upstream's rotator's, fixed there: a 10-year CA, a
# 1-year serving certificate, each replaced 90 days before it would stop verifying.
CA_VALIDITY = "87600h"
CERT_VALIDITY = "8760h"
CERT_LOOKAHEAD = "2160h"


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


@dataclass(frozen=True)
class _Key:
    """How one field is read from the file: its key there, and either a decoder (value -> field
    value; ValueError says why a value is refused) or the section class it holds."""

    name: str
    decode: Callable[[Any], Any] | None = None
    section: type[Any] | None = None


def _key(name: str, decode: Callable[[Any], Any], default: Any) -> Any:
    return field(default=default, metadata={"key": _Key(name, decode=decode)})


def _at(name: str, section: type[Any]) -> dict[str, _Key]:
    """The metadata of a field holding a section (`field(default_factory=..., metadata=...)`)."""
    return {"key": _Key(name, section=section)}


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {_shown(value)}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {_shown(value)}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {_shown(value)}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {_shown(value)}")
    return float(value)


def _one_of(*allowed: str) -> Callable[[Any], str]:
    def decode(value: Any) -> str:
        if value not in allowed:
            choices = ", ".join(f"'{choice}'" for choice in allowed)
            raise ValueError(f"expected one of {choices}, got {_shown(value)}")
        return str(value)

    return decode


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of strings, got {_shown(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"item {index}: expected a string, got {_shown(item)}")
    return tuple(value)


def _gates(value: Any) -> dict[str, bool]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a map of gate names to true or false, got {_shown(value)}")
    for name, on in value.items():
        if not isinstance(on, bool):
            raise ValueError(f"gate {str(name)!r}: expected true or false, got {_shown(on)}")
    return {str(name): on for name, on in value.items()}


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else repr(value)


@dataclass(frozen=True)
class LeaderElection:
    leader_elect: bool = _key("leaderElect", _bool, True)
    resource_name: str = _key("resourceName", _str, "6d4f6a47.jobset.x-k8s.io")
    resource_lock: str = _key("resourceLock", _one_of("leases"), "leases")
    resource_namespace: str = _key("resourceNamespace", _str, "")
    lease_duration: float = _key("leaseDuration", parse_duration, 15.0)
    renew_deadline: float = _key("renewDeadline", parse_duration, 10.0)
    retry_period: float = _key("retryPeriod", parse_duration, 2.0)


@dataclass(frozen=True)
class Webhook:
    port: int = _key("port", _int, 9443)
    host: str = _key("host", _str, "")
    cert_dir: str = _key("certDir", _str, "")


@dataclass(frozen=True)
class Metrics:
    bind_address: str = _key("bindAddress", _str, ":8443")
    cert_dir: str = _key("certDir", _str, "")


@dataclass(frozen=True)
class Health:
    health_probe_bind_address: str = _key("healthProbeBindAddress", _str, ":8081")
    readiness_endpoint_name: str = _key("readinessEndpointName", _str, "readyz")
    liveness_endpoint_name: str = _key("livenessEndpointName", _str, "healthz")


@dataclass(frozen=True)
class InternalCertManagement:
    enable: bool = _key("enable", _bool, True)
    webhook_service_name: str = _key("webhookServiceName", _str, "jobset-webhook-service")
    webhook_secret_name: str = _key("webhookSecretName", _str, "jobset-webhook-server-cert")


@dataclass(frozen=True)
class ClientConnection:
    qps: float = _key("qps", _number, 500.0)
    burst: int = _key("burst", _int, 500)


@dataclass(frozen=True)
class TLS:
    min_version: str = _key("minVersion", _one_of("", "VersionTLS12", "VersionTLS13"), "")
    cipher_suites: tuple[str, ...] = _key("cipherSuites", _strings, ())


@dataclass(frozen=True)
class ExclusivePlacement:
    """Ours (upstream has no such key): what the pod webhooks do with a follower created before
    its leader is bound. `Gate` admits it behind a scheduling gate that the pod controller lifts
    once the leader is bound; `Reject` refuses the create as upstream does (the Job controller
    retries with backoff). Reject is the default: the placement benchmark (docs/benchmarks.md)
    measured it faster on the local cluster (the Job controller creates index 0 first, so few
    followers are refused); Gate trades that speed for zero refused creates."""

    followers: str = _key("followers", _one_of("Gate", "Reject"), "Reject")
    # Off by default. With it, a follower the mutating webhook places also requires the nodes of
    # its leader's domain by name (`metadata.name In [<node>]` terms, as the node cache sees them at
    # admission), so kube-scheduler filters those nodes only, not the whole cluster. The cost: a
    # node that joins the domain after a follower was admitted is not one that follower may
    # use. docs/behaviour.md#narrowing-followers-to-their-domains-nodes.
    follower_node_affinity: bool = _key("followerNodeAffinity", _bool, False)


@dataclass(frozen=True)
class DeferredChildren:
    """Ours (upstream has no such key): with `enable`, a JobSet that is suspended and has never
    run gets no Jobs and no headless Service until its first resume (its status, conditions and
    everything Kueue reads look as if its suspended Jobs existed). Off by default, so the default
    stays upstream's behaviour (every suspended JobSet has its suspended Jobs). Turn it on where
    many JobSets wait in a queue (Kueue): each one otherwise keeps a Job per replica and a
    Service in etcd and in every Job informer of the cluster before it ever runs
    (docs/benchmarks.md, "Deferred children"). docs/behaviour.md#deferred-children."""

    enable: bool = _key("enable", _bool, False)


@dataclass(frozen=True)
class EarlyJobConditions:
    """Ours (upstream has no such key): with `enable`, a child Job's interim conditions count as
    its outcome: `FailureTarget=True` as `Failed` (the failure policy restarts or fails the
    JobSet) and `SuccessCriteriaMet=True` as `Complete` (the success policy). The Job controller
    sets them as soon as the outcome is certain and adds the terminal condition only once every
    pod of the Job has terminated; waiting for it costs a restart one more termination grace
    period (the failed Job's pods, then everyone else's). Off by default (upstream waits for the
    terminal condition). The risk: the failed Job's terminating pods and the rest of the JobSet's
    being deleted overlap for at most one grace period, and with Kueue the JobSet finishes while
    its last pods still hold their resources. docs/behaviour.md#early-job-conditions."""

    enable: bool = _key("enable", _bool, False)


def _optional_duration(value: Any) -> float | None:
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"a duration must not be negative, got {value!r}")
    return seconds


@dataclass(frozen=True)
class UnreachableNodePods:
    """Ours (upstream has no such key): a JobSet pod that is being deleted on a node tainted
    `node.kubernetes.io/unreachable` or `node.kubernetes.io/not-ready` never finishes
    terminating (no kubelet confirms it), so the Job holding it is never deleted and the
    JobSet's next attempt never starts (kubernetes-sigs/jobset#576). With `forceDelete` (the
    default) the pod controller force-deletes such a pod once it has been terminating past
    `forceDeleteAfter` beyond its `deletionTimestamp` (unset: the pod's own grace period, i.e.
    twice the grace period after the delete request), as the pod garbage collector does on an
    out-of-service node. The risk: a pod on a node that is only cut off from the API server may
    still run after its object is gone. docs/behaviour.md#pods-on-unreachable-nodes."""

    force_delete: bool = _key("forceDelete", _bool, True)
    force_delete_after: float | None = _key("forceDeleteAfter", _optional_duration, None)


def _batch_period(value: Any) -> float:
    seconds = parse_duration(value)
    if not 0 <= seconds <= 60:
        raise ValueError(f"must be between 0s and 60s, got {value!r}")
    return seconds


@dataclass(frozen=True)
class ProgressCounts:
    """Ours (upstream has no such key): a status write whose only news is progress counters
    (`replicatedJobsStatus[].active`, `ready`, `succeeded`, `suspended`) waits until `batchPeriod`
    has passed since the pass that first saw such a change, and carries every change seen
    meanwhile; anything else (a condition, a restart, a `failed` count, a new entry) is written
    at once. Kube's Job controller gathers its pod updates for 1 s the same way. The default 1s
    takes 40% of the JobSet status writes off a busy cluster (docs/reliability.md); 0s writes every
    change at once, as upstream does. docs/behaviour.md#progress-counters."""

    batch_period: float = _key("batchPeriod", _batch_period, 1.0)


@dataclass(frozen=True)
class Configuration:
    api_version: str = _key(
        "apiVersion", _one_of("config.jobset.x-k8s.io/v1alpha1"), "config.jobset.x-k8s.io/v1alpha1"
    )
    kind: str = _key("kind", _one_of("Configuration"), "Configuration")
    webhook: Webhook = field(default_factory=Webhook, metadata=_at("webhook", Webhook))
    leader_election: LeaderElection = field(
        default_factory=LeaderElection, metadata=_at("leaderElection", LeaderElection)
    )
    metrics: Metrics = field(default_factory=Metrics, metadata=_at("metrics", Metrics))
    health: Health = field(default_factory=Health, metadata=_at("health", Health))
    internal_cert_management: InternalCertManagement = field(
        default_factory=InternalCertManagement,
        metadata=_at("internalCertManagement", InternalCertManagement),
    )
    client_connection: ClientConnection = field(
        default_factory=ClientConnection, metadata=_at("clientConnection", ClientConnection)
    )
    feature_gates: dict[str, bool] = field(
        default_factory=dict, metadata={"key": _Key("featureGates", decode=_gates)}
    )
    tls: TLS = field(default_factory=TLS, metadata=_at("tls", TLS))
    exclusive_placement: ExclusivePlacement = field(
        default_factory=ExclusivePlacement, metadata=_at("exclusivePlacement", ExclusivePlacement)
    )
    deferred_children: DeferredChildren = field(
        default_factory=DeferredChildren, metadata=_at("deferredChildren", DeferredChildren)
    )
    early_job_conditions: EarlyJobConditions = field(
        default_factory=EarlyJobConditions,
        metadata=_at("earlyJobConditions", EarlyJobConditions),
    )
    unreachable_node_pods: UnreachableNodePods = field(
        default_factory=UnreachableNodePods,
        metadata=_at("unreachableNodePods", UnreachableNodePods),
    )
    progress_counts: ProgressCounts = field(
        default_factory=ProgressCounts, metadata=_at("progressCounts", ProgressCounts)
    )


class _Refused(ValueError):
    """A value refused at a location in the file (keys joined with dots)."""


def _decode(cls: type[Any], data: Any, location: str) -> Any:
    """Strictly decode one mapping into `cls`: every key must be one of its fields' keys (else
    "unknown field", as upstream's strict decoding says it); a null value keeps the default, as
    decoding `null` into a Go struct field does."""
    if not isinstance(data, dict):
        raise _Refused(f"{location}: expected a map, got {_shown(data)}")  # a section
    by_key = {f.metadata["key"].name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{location}.{key}" if location else str(key)
        spec = by_key.get(key)
        if spec is None:
            raise _Refused(f"{where}: unknown field")
        if value is None:
            continue
        how: _Key = spec.metadata["key"]
        if how.section is not None:
            values[spec.name] = _decode(how.section, value, where)
            continue
        assert how.decode is not None
        try:
            values[spec.name] = how.decode(value)
        except ValueError as error:
            raise _Refused(f"{where}: {error}") from None
    return cls(**values)


def load_configuration(path: str | Path | None) -> Configuration:
    """Read and strictly decode the file; no path means built-in defaults."""
    if not path:
        return Configuration()
    import yaml  # only with a file: 10-15 ms of a start without one

    try:
        data = yaml.load(Path(path).read_text(), Loader=_go_yaml_loader(yaml)) or {}
    except OSError as error:
        raise ConfigError(f"--config {path}: cannot read: {error.strerror}") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"--config {path}: not valid YAML: {error}") from error
    return parse_configuration(data, source=f"--config {path}")


def _go_yaml_loader(yaml: Any) -> Any:
    """PyYAML's safe loader, reading plain scalars as floats where upstream's YAML reader does.

    Upstream decodes the file with go-yaml, whose exponents need neither a dot nor a sign:
    `qps: 1e3` and `qps: 1.0e3` are 1000.0 there and strings to PyYAML (its YAML 1.1 floats
    want `1.0e+3`), which `qps` would refuse. Quoted scalars stay strings in both. PyYAML's own
    resolvers are tried first, so this one only sees what they left as a string."""

    class GoYAMLLoader(yaml.SafeLoader):  # type: ignore[misc]
        pass

    GoYAMLLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789.")
    )
    return GoYAMLLoader


# go-yaml's floats with an exponent (`1e3`, `1.0e3`, `.5E-1`, `-2e+2`).
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")


def parse_configuration(data: Any, *, source: str = "configuration") -> Configuration:
    """Strictly decode a parsed Configuration document; ConfigError starts with `source`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        config: Configuration = _decode(Configuration, data, "")
    except _Refused as error:
        raise ConfigError(f"{source}: {error}") from None
    if config.tls.min_version == "VersionTLS13" and config.tls.cipher_suites:
        raise ConfigError(
            f"{source}: tls.cipherSuites: may not be specified when minVersion is 'VersionTLS13'"
        )
    try:
        openssl_cipher_list(config.tls.cipher_suites)
    except ValueError as error:
        raise ConfigError(f"{source}: tls.cipherSuites: {error}") from None
    return config
