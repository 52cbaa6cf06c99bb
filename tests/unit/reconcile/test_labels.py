"""The label/annotation set on every child Job and its pod template.

See docs/behaviour.md#child-labels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from jobset_controller.api import (
    COORDINATOR_KEY,
    EXCLUSIVE_KEY,
    GLOBAL_REPLICAS_KEY,
    GROUP_NAME_KEY,
    GROUP_REPLICAS_KEY,
    JOB_GLOBAL_INDEX_KEY,
    JOB_GROUP_INDEX_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    JOBSET_NAME_KEY,
    JOBSET_UID_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    REPLICATED_JOB_NAME_KEY,
    REPLICATED_JOB_REPLICAS_KEY,
    RESTARTS_KEY,
    FeatureGates,
)

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit


def grouped(kit: Kit) -> JobSetBuilder:
    """leader x1 (group a), workers x3 (group b), ps x2 (group a); coordinator workers-1-2."""
    return (
        kit.jobset()
        .replicated_job("leader", replicas=1, group_name="a")
        .replicated_job("workers", replicas=3, group_name="b", parallelism=4, completions=4)
        .replicated_job("ps", replicas=2, group_name="a")
        .coordinator("workers", job_index=1, pod_index=2)
    )


def created(kit: Kit, builder: JobSetBuilder, **kwargs: Any) -> dict[str, Mapping[str, Any]]:
    plan = kit.reconcile(builder, **kwargs)
    return {job["metadata"]["name"]: job for job in plan.jobs_to_create}


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


# (job name, key, expected value)
LABEL_CASES = [
    ("trainer-leader-0", JOBSET_NAME_KEY, "trainer"),
    ("trainer-leader-0", JOBSET_UID_KEY, "jobset-uid-1"),
    ("trainer-workers-2", REPLICATED_JOB_NAME_KEY, "workers"),
    ("trainer-workers-2", RESTARTS_KEY, "0"),
    ("trainer-workers-2", REPLICATED_JOB_REPLICAS_KEY, "3"),
    ("trainer-ps-1", REPLICATED_JOB_REPLICAS_KEY, "2"),
    ("trainer-ps-1", GLOBAL_REPLICAS_KEY, "6"),
    ("trainer-workers-2", JOB_INDEX_KEY, "2"),
    ("trainer-workers-2", JOB_KEY, sha1("ml/trainer-workers-2")),
    ("trainer-leader-0", JOB_GLOBAL_INDEX_KEY, "0"),
    ("trainer-workers-0", JOB_GLOBAL_INDEX_KEY, "1"),
    ("trainer-workers-2", JOB_GLOBAL_INDEX_KEY, "3"),
    ("trainer-ps-0", JOB_GLOBAL_INDEX_KEY, "4"),
    ("trainer-ps-1", JOB_GLOBAL_INDEX_KEY, "5"),
    ("trainer-ps-1", GROUP_NAME_KEY, "a"),
    ("trainer-workers-0", GROUP_NAME_KEY, "b"),
    ("trainer-leader-0", GROUP_REPLICAS_KEY, "3"),
    ("trainer-workers-1", GROUP_REPLICAS_KEY, "3"),
    ("trainer-leader-0", JOB_GROUP_INDEX_KEY, "0"),
    ("trainer-workers-1", JOB_GROUP_INDEX_KEY, "1"),
    ("trainer-ps-0", JOB_GROUP_INDEX_KEY, "1"),
    ("trainer-ps-1", JOB_GROUP_INDEX_KEY, "2"),
    ("trainer-ps-1", COORDINATOR_KEY, "trainer-workers-1-2.trainer"),
]


@pytest.mark.parametrize(
    ("job_name", "key", "expected"),
    LABEL_CASES,
    ids=[f"{name} {key.split('/')[-1]} is {value[:12]}" for name, key, value in LABEL_CASES],
)
def test_every_key_is_a_label_and_annotation_on_job_and_pod_template(
    kit: Kit, job_name: str, key: str, expected: str
) -> None:
    job = created(kit, grouped(kit))[job_name]
    pod_metadata = job["spec"]["template"]["metadata"]
    assert job["metadata"]["labels"][key] == expected
    assert job["metadata"]["annotations"][key] == expected
    assert pod_metadata["labels"][key] == expected
    assert pod_metadata["annotations"][key] == expected


def test_job_key_is_forty_hex_chars_of_sha1_not_sha256(kit: Kit) -> None:
    job = created(kit, grouped(kit))["trainer-leader-0"]
    value = job["metadata"]["labels"][JOB_KEY]
    assert len(value) == 40
    assert value == hashlib.sha1(b"ml/trainer-leader-0").hexdigest()


def test_restart_attempt_is_the_status_restarts_at_creation(kit: Kit) -> None:
    builder = kit.jobset().replicated_job("w").status(restarts=3, restartsCountTowardsMax=2)
    job = created(kit, builder)["trainer-w-0"]
    assert job["metadata"]["labels"][RESTARTS_KEY] == "3"


def test_coordinator_uses_custom_subdomain_even_without_dns_hostnames(kit: Kit) -> None:
    builder = (
        kit.jobset()
        .replicated_job("w")
        .coordinator("w")
        .network(enableDNSHostnames=False, subdomain="mesh")
    )
    job = created(kit, builder)["trainer-w-0"]
    assert job["metadata"]["labels"][COORDINATOR_KEY] == "trainer-w-0-0.mesh"


def test_no_coordinator_key_without_coordinator(kit: Kit) -> None:
    job = created(kit, kit.jobset().replicated_job("w"))["trainer-w-0"]
    assert COORDINATOR_KEY not in job["metadata"]["labels"]


@pytest.mark.parametrize(
    ("gate", "job_restarts", "expected"),
    [
        (False, None, None),
        (True, None, "0"),
        (True, [0, 4], "4"),
    ],
    ids=[
        "without the RestartJob gate there is no job-restart-attempt",
        "with the gate and no jobRestarts it is 0",
        "with the gate it is jobRestarts of the job index",
    ],
)
def test_job_restart_attempt_label(
    kit: Kit, gate: bool, job_restarts: list[int] | None, expected: str | None
) -> None:
    builder = kit.jobset().replicated_job("w", replicas=2)
    entry: dict[str, Any] = {
        "name": "w",
        "ready": 0,
        "succeeded": 0,
        "failed": 0,
        "active": 0,
        "suspended": 0,
    }
    if job_restarts is not None:
        entry["jobRestarts"] = job_restarts
    builder.status(replicatedJobsStatus=[entry])
    jobs = created(kit, builder, features=FeatureGates(restart_job=gate))
    labels = jobs["trainer-w-1"]["metadata"]["labels"]
    annotations = jobs["trainer-w-1"]["metadata"]["annotations"]
    assert labels.get(JOB_RESTART_ATTEMPT_KEY) == expected
    assert annotations.get(JOB_RESTART_ATTEMPT_KEY) == expected


def test_template_labels_and_annotations_are_kept_and_jobset_keys_win(kit: Kit) -> None:
    builder = kit.jobset().replicated_job(
        "w",
        job_labels={"team": "ml", JOBSET_NAME_KEY: "spoofed"},
        job_annotations={"note": "x"},
        pod_labels={"app": "train"},
        pod_annotations={"sidecar": "on"},
    )
    job = created(kit, builder)["trainer-w-0"]
    assert job["metadata"]["labels"]["team"] == "ml"
    assert job["metadata"]["labels"][JOBSET_NAME_KEY] == "trainer"
    assert job["metadata"]["annotations"]["note"] == "x"
    pod_metadata = job["spec"]["template"]["metadata"]
    assert pod_metadata["labels"]["app"] == "train"
    assert pod_metadata["annotations"]["sidecar"] == "on"
    # Job-template metadata does not leak into the pod template, nor the reverse.
    assert "team" not in pod_metadata["labels"]
    assert "app" not in job["metadata"]["labels"]


EXCLUSIVE_CASES: list[tuple[str, dict[str, str], dict[str, str], dict[str, str]]] = [
    ("no exclusive annotation anywhere", {}, {}, {}),
    (
        "jobset level exclusive applies to every job",
        {EXCLUSIVE_KEY: "zone"},
        {},
        {EXCLUSIVE_KEY: "zone"},
    ),
    (
        "replicatedJob level wins over the jobset level",
        {EXCLUSIVE_KEY: "zone"},
        {EXCLUSIVE_KEY: "rack"},
        {EXCLUSIVE_KEY: "rack"},
    ),
    (
        "node-selector flag is copied with the exclusive annotation",
        {EXCLUSIVE_KEY: "zone", NODE_SELECTOR_STRATEGY_KEY: "true"},
        {},
        {EXCLUSIVE_KEY: "zone", NODE_SELECTOR_STRATEGY_KEY: "true"},
    ),
    (
        "node-selector flag alone at the jobset level is not copied",
        {NODE_SELECTOR_STRATEGY_KEY: "true"},
        {},
        {},
    ),
]


@pytest.mark.parametrize(
    ("jobset_annotations", "template_annotations", "expected"),
    [case[1:] for case in EXCLUSIVE_CASES],
    ids=[case[0] for case in EXCLUSIVE_CASES],
)
def test_exclusive_placement_annotations_on_pod_template(
    kit: Kit,
    jobset_annotations: dict[str, str],
    template_annotations: dict[str, str],
    expected: dict[str, str],
) -> None:
    builder = kit.jobset().replicated_job("w", job_annotations=template_annotations or None)
    builder.annotations(**jobset_annotations)
    job = created(kit, builder)["trainer-w-0"]
    pod_annotations = job["spec"]["template"]["metadata"]["annotations"]
    exclusive_keys = {EXCLUSIVE_KEY, NODE_SELECTOR_STRATEGY_KEY}
    assert {k: v for k, v in pod_annotations.items() if k in exclusive_keys} == expected
    # Annotations only, never labels.
    assert not exclusive_keys & set(job["metadata"]["labels"])
    assert not exclusive_keys & set(job["spec"]["template"]["metadata"]["labels"])
