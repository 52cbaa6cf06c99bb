"""FeatureGates: upstream gate names, defaults, and what component-base refuses."""

import dataclasses

import pytest

from jobset_controller.api import FeatureGates


def test_defaults_match_the_gate_table() -> None:
    gates = FeatureGates()
    assert (gates.in_place_restart, gates.restart_job, gates.elastic_job_set) == (
        False,
        False,
        False,
    )
    assert gates.tls_options is True
    assert gates.execution_attempts_tracking is False
    assert gates.mutable_pod_resources_for_suspended_job_sets is False
    assert gates.active_deadline_seconds is False


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        pytest.param({}, FeatureGates(), id="empty map keeps defaults"),
        pytest.param(
            {"InPlaceRestart": True}, FeatureGates(in_place_restart=True), id="InPlaceRestart"
        ),
        pytest.param({"RestartJob": True}, FeatureGates(restart_job=True), id="RestartJob"),
        pytest.param(
            {"ElasticJobSet": True}, FeatureGates(elastic_job_set=True), id="ElasticJobSet"
        ),
        pytest.param({"TLSOptions": True}, FeatureGates(), id="TLSOptions true is accepted"),
        pytest.param(
            {"ExecutionAttemptsTracking": True},
            FeatureGates(execution_attempts_tracking=True),
            id="ExecutionAttemptsTracking",
        ),
        pytest.param(
            {"MutablePodResourcesForSuspendedJobSets": True},
            FeatureGates(mutable_pod_resources_for_suspended_job_sets=True),
            id="MutablePodResourcesForSuspendedJobSets",
        ),
        pytest.param(
            {"JobSetActiveDeadlineSeconds": True},
            FeatureGates(active_deadline_seconds=True),
            id="JobSetActiveDeadlineSeconds",
        ),
        pytest.param(
            {"RestartJob": True, "ElasticJobSet": False},
            FeatureGates(restart_job=True),
            id="several gates, explicit false",
        ),
    ],
)
def test_from_mapping_uses_upstream_gate_names(
    mapping: dict[str, bool], expected: FeatureGates
) -> None:
    assert FeatureGates.from_mapping(mapping) == expected


def test_unknown_gate_is_rejected_with_component_base_message() -> None:
    with pytest.raises(ValueError, match=r"^unrecognized feature gate: RestartJobs$"):
        FeatureGates.from_mapping({"RestartJobs": True})


def test_locked_ga_gate_cannot_be_disabled() -> None:
    with pytest.raises(ValueError, match="TLSOptions"):
        FeatureGates.from_mapping({"TLSOptions": False})
    with pytest.raises(ValueError, match="locked to true"):
        FeatureGates(tls_options=False)


def test_non_boolean_gate_value_is_rejected() -> None:
    with pytest.raises(ValueError, match="RestartJob"):
        FeatureGates.from_mapping({"RestartJob": "true"})  # type: ignore[dict-item]


def test_gates_are_frozen() -> None:
    gates = FeatureGates()
    with pytest.raises(dataclasses.FrozenInstanceError):
        gates.restart_job = True  # type: ignore[misc]
