"""The soak's workload mix: seeded, valid against the API's own checks, expectations per shape."""

from __future__ import annotations

import random

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.api.defaults import default_jobset
from jobset_controller.api.types import JobSet
from jobset_controller.api.validation import validate_create
from jobset_controller_dev.envtest.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from jobset_controller_dev.soak import mix


def test_the_same_seed_draws_the_same_workloads() -> None:
    first = [mix.draw(random.Random(7), i) for i in range(3)]
    again = [mix.draw(random.Random(7), i) for i in range(3)]
    assert [w.manifest for w in first] == [w.manifest for w in again]


def test_a_long_run_draws_every_shape() -> None:
    rng = random.Random(1)
    assert {mix.draw(rng, i).shape for i in range(2000)} == set(mix.WEIGHTS)


@pytest.mark.parametrize("shape", [*mix.WEIGHTS, "burst"])
def test_every_shape_passes_admission_without_feature_gates(shape: str) -> None:
    workload = mix.build(f"soak-00001-{shape}", shape, random.Random(3))
    js = default_jobset(JobSet.model_validate(workload.manifest))
    errors = validate_create(js, features=FeatureGates())
    assert errors == [], errors


def test_shapes_that_restart_have_a_failure_injected_in_attempt_zero() -> None:
    rng = random.Random(0)
    for shape in mix.WEIGHTS:
        workload = mix.build("x", shape, rng)
        if workload.expect.restarts and workload.expect.terminal == mix.COMPLETED:
            assert workload.inject == frozenset({0}), shape
        else:
            assert workload.inject == frozenset(), shape


def test_queued_shapes_name_a_queue_and_a_priority() -> None:
    workload = mix.build("x", "queued-high", random.Random(0))
    labels = workload.manifest["metadata"]["labels"]
    assert labels[QUEUE_NAME_LABEL] == mix.HIGH_QUEUE
    assert labels[PRIORITY_CLASS_LABEL] == mix.HIGH_PRIORITY
    assert workload.expect.queued
