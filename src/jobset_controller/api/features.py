"""Feature gates, passed explicitly as a value instead of read from a process-wide registry.

Why a frozen dataclass: upstream reads gates from a global inside its helpers, which hides an input
of every decision. Here validation, the webhooks and the reconciler (``Snapshot.features``) take
a ``FeatureGates`` argument, so a test states the gates it runs under and two callers with
different gates never interfere.

Gate names, stages and defaults: docs/behaviour.md#feature-gates. ``from_mapping`` accepts the
config file's ``featureGates`` map with upstream's gate names and rejects what upstream's
component-base rejects: an unknown name, and turning off a gate that is GA and locked to true.
"""

from collections.abc import Mapping
from dataclasses import dataclass

# Upstream gate name -> attribute of FeatureGates.
_GATE_ATTRIBUTES: Mapping[str, str] = {
    "InPlaceRestart": "in_place_restart",
    "RestartJob": "restart_job",
    "ElasticJobSet": "elastic_job_set",
    "TLSOptions": "tls_options",
    "ExecutionAttemptsTracking": "execution_attempts_tracking",
    "MutablePodResourcesForSuspendedJobSets": "mutable_pod_resources_for_suspended_job_sets",
    "JobSetWorkloadAwareSchedulingAPI": "workload_aware_scheduling",
    "JobSetActiveDeadlineSeconds": "active_deadline_seconds",
}

# Upstream's gate names, in the order above: the one list of them.
GATE_NAMES: tuple[str, ...] = tuple(_GATE_ATTRIBUTES)


def gate_name(attribute: str) -> str:
    """Upstream's name of the gate a ``FeatureGates`` attribute holds (KeyError if none)."""
    return next(gate for gate, held in _GATE_ATTRIBUTES.items() if held == attribute)


# GA gates cannot be switched off any more (value they are locked to).
_LOCKED_GATES: Mapping[str, bool] = {"TLSOptions": True}


@dataclass(frozen=True)
class FeatureGates:
    """The set of feature gates the controller and its webhooks run with.

    Attributes:
        in_place_restart: Alpha. Allows ``failurePolicy.restartStrategy: InPlaceRestart``.
        restart_job: Alpha. Allows the ``RestartJob*`` failure policy actions.
        elastic_job_set: Alpha. Allows changing parallelism/completions of Indexed replicatedJobs.
        tls_options: GA, locked to true. Honours the ``tls`` block of the config file.
        execution_attempts_tracking: Alpha (KEP-1282). ``status.executionAttempts`` counts every
            run of the JobSet (each resume after a suspension and each global restart), and the
            Jobs of each run carry it in the ``execution-attempt`` annotation.
        mutable_pod_resources_for_suspended_job_sets: Alpha (KEP-1150). Container and init
            container ``resources.requests``/``limits`` may change while the JobSet is (or
            becomes) suspended; resuming carries them into the suspended child Jobs.
        workload_aware_scheduling: Alpha (KEP-969, gate ``JobSetWorkloadAwareSchedulingAPI``).
            Allows ``spec.scheduling``: the controller compiles it into one Workload and its
            PodGroups (scheduling.k8s.io/v1beta1, Kubernetes >= 1.37) and links the pods to
            them. Off: a JobSet setting ``spec.scheduling`` is rejected at admission and no
            Workload or PodGroup is ever created (docs/behaviour.md#gang-scheduling).
        active_deadline_seconds: Alpha (KEP-1186, gate ``JobSetActiveDeadlineSeconds``; ahead of
            upstream). The controller keeps ``status.startTime`` and fails a JobSet running longer
            than ``spec.activeDeadlineSeconds``. Off: the field is kept in the spec but never
            enforced, and ``status.startTime`` is neither set nor changed
            (docs/behaviour.md#active-deadline).
    """

    in_place_restart: bool = False
    restart_job: bool = False
    elastic_job_set: bool = False
    tls_options: bool = True
    execution_attempts_tracking: bool = False
    mutable_pod_resources_for_suspended_job_sets: bool = False
    workload_aware_scheduling: bool = False
    active_deadline_seconds: bool = False

    def __post_init__(self) -> None:
        for gate, locked_value in _LOCKED_GATES.items():
            if getattr(self, _GATE_ATTRIBUTES[gate]) != locked_value:
                raise ValueError(_locked_message(gate, locked_value))

    @classmethod
    def from_mapping(cls, gates: Mapping[str, bool]) -> "FeatureGates":
        """Build gates from upstream gate names, e.g. ``{"RestartJob": True}``.

        Gates not named keep their default. Raises ValueError for an unknown gate name, a
        non-boolean value, or an attempt to change a locked (GA) gate.
        """
        values: dict[str, bool] = {}
        for gate, enabled in gates.items():
            attribute = _GATE_ATTRIBUTES.get(gate)
            if attribute is None:
                raise ValueError(f"unrecognized feature gate: {gate}")
            if not isinstance(enabled, bool):
                raise ValueError(f"invalid value of feature gate {gate}: {enabled!r} is not a bool")
            locked_value = _LOCKED_GATES.get(gate)
            if locked_value is not None and enabled != locked_value:
                raise ValueError(_locked_message(gate, locked_value))
            values[attribute] = enabled
        return cls(**values)


def _locked_message(gate: str, locked_value: bool) -> str:
    value = "true" if locked_value else "false"
    opposite = "false" if locked_value else "true"
    return f"cannot set feature gate {gate} to {opposite}, feature is locked to {value}"
