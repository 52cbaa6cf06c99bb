"""spec.activeDeadlineSeconds at admission (docs/behaviour.md#active-deadline): its CRD bound
(`minimum: 1`) refuses 0 and negatives with the field path, as `ttlSecondsAfterFinished`'s does,
and with the gate off the field is accepted and kept, never stripped."""

from __future__ import annotations

from typing import Any

import pytest

from jobset_controller.api import API_VERSION, KIND, FeatureGates
from jobset_controller.api.manifest import check_manifest


def manifest(**spec: Any) -> dict[str, Any]:
    pod = {"containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": pod}}}}],
            **spec,
        },
    }


@pytest.mark.parametrize("seconds", [0, -1])
def test_an_active_deadline_below_one_is_refused_with_its_field_path(seconds: int) -> None:
    [error] = check_manifest(manifest(activeDeadlineSeconds=seconds)).errors
    assert (error.field, error.type, error.bad_value) == (
        "spec.activeDeadlineSeconds",
        "Invalid",
        seconds,
    )
    assert str(error) == (
        f"spec.activeDeadlineSeconds: Invalid value: {seconds}: "
        "Input should be greater than or equal to 1"
    )


@pytest.mark.parametrize(
    "gates", [FeatureGates(), FeatureGates(active_deadline_seconds=True)], ids=["gate off", "on"]
)
@pytest.mark.parametrize("seconds", [1, 2**63 - 1])
def test_an_active_deadline_is_accepted_and_kept_whatever_the_gate(
    gates: FeatureGates, seconds: int
) -> None:
    check = check_manifest(manifest(activeDeadlineSeconds=seconds), features=gates)
    assert check.errors == ()
    assert check.jobset is not None
    assert check.jobset.to_dict()["spec"]["activeDeadlineSeconds"] == seconds
