"""`jobset-controller plan`: the real reconcile, simulated pass by pass on an empty cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller.api import JobSet
from jobset_controller.cli import main
from jobset_controller.reconcile.job_creation import MAX_JOB_CREATES_PER_PASS
from jobset_controller.tools.plan import PLACEHOLDER_UID, simulate

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def jobset(**spec: Any) -> JobSet:
    container = {"name": "c", "image": "busybox"}
    rjobs = spec.pop("replicatedJobs")
    for rjob in rjobs:
        rjob.setdefault("template", {"spec": {"template": {"spec": {"containers": [container]}}}})
    return JobSet.model_validate(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js"},
            "spec": {"replicatedJobs": rjobs, **spec},
        }
    )


def created(names_by_pass: list[list[str]], simulation: Any) -> None:
    got = [[job["metadata"]["name"] for job in one.jobs] for one in simulation.passes]
    assert got == names_by_pass


@pytest.mark.parametrize(
    ("spec", "passes", "gates", "not_created", "outcome"),
    [
        pytest.param(
            {"replicatedJobs": [{"name": "a", "replicas": 2}, {"name": "b"}]},
            [["js-a-0", "js-a-1", "js-b-0"]],
            {},
            (),
            "",
            id="no-dependencies-one-pass",
        ),
        pytest.param(
            {
                "replicatedJobs": [
                    {"name": "a"},
                    {"name": "b", "dependsOn": [{"name": "a", "status": "Ready"}]},
                ]
            },
            [["js-a-0"], ["js-b-0"]],
            {"b": ("dependsOn a Ready",)},
            (),
            "",
            id="depends-on-ready-next-pass",
        ),
        pytest.param(
            {
                "startupPolicy": {"startupPolicyOrder": "InOrder"},
                "replicatedJobs": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
            },
            [["js-a-0"], ["js-b-0"], ["js-c-0"]],
            {"b": ("InOrder: a started",), "c": ("InOrder: b started",)},
            (),
            "",
            id="in-order-one-per-pass",
        ),
        pytest.param(
            {
                "successPolicy": {"operator": "Any"},
                "replicatedJobs": [
                    {"name": "a"},
                    {"name": "b", "dependsOn": [{"name": "a", "status": "Complete"}]},
                ],
            },
            [["js-a-0"]],
            {"b": ("dependsOn a Complete",)},
            ("js-b-0",),
            "the JobSet completes: AllJobsCompleted: jobset completed successfully",
            id="complete-dependency-under-any-completes-first",
        ),
        pytest.param(
            {
                "suspend": True,
                "replicatedJobs": [
                    {"name": "a"},
                    {"name": "b", "dependsOn": [{"name": "a", "status": "Ready"}]},
                ],
            },
            [["js-a-0"]],
            {"b": ("dependsOn a Ready",)},
            ("js-b-0",),
            "the JobSet is suspended: the remaining Jobs are created after it is resumed",
            id="suspended-dependents-wait-for-resume",
        ),
        pytest.param(
            {
                "failurePolicy": {"restartStrategy": "InPlaceRestart"},
                "replicatedJobs": [{"name": "a"}],
            },
            [],
            {},
            ("js-a-0",),
            "the JobSet fails: InPlaceRestartNotSupported",
            id="refused-jobset-fails",
        ),
    ],
)
def test_passes_follow_reconcile(
    spec: dict[str, Any],
    passes: list[list[str]],
    gates: dict[str, tuple[str, ...]],
    not_created: tuple[str, ...],
    outcome: str,
) -> None:
    simulation = simulate(jobset(**spec), namespace="ns", now=NOW)
    created(passes, simulation)
    assert dict(simulation.waits) == gates
    assert simulation.not_created == not_created
    assert simulation.outcome.startswith(outcome)


def test_creation_bound_spreads_a_huge_jobset_over_passes() -> None:
    simulation = simulate(
        jobset(replicatedJobs=[{"name": "a", "replicas": 2 * MAX_JOB_CREATES_PER_PASS + 201}]),
        namespace="n",
        now=NOW,
    )
    bound = MAX_JOB_CREATES_PER_PASS
    assert [len(one.jobs) for one in simulation.passes] == [bound, bound, 201]
    assert [one.number for one in simulation.passes] == [1, 2, 3]
    assert not simulation.not_created


def test_passes_are_numbered_as_they_are_counted(capsys: pytest.CaptureFixture[str]) -> None:
    """A pass that creates nothing (waiting for the initializer to finish) is not numbered, so
    "created in 2 passes" is followed by pass 1 and pass 2, not pass 1 and pass 3."""
    assert main(["plan", str(EXAMPLES / "depends-on.yaml")]) == 0
    out = capsys.readouterr().out
    assert "created in 2 passes" in out
    headers = [line.strip() for line in out.splitlines() if line.startswith("  pass ")]
    assert headers == ["pass 1:", "pass 2, once the Jobs of initializer succeeded:"]


def test_jobs_carry_namespace_placeholder_uid_and_owner() -> None:
    simulation = simulate(jobset(replicatedJobs=[{"name": "a"}]), namespace="team", now=NOW)
    job = simulation.jobs[0]
    assert job["metadata"]["namespace"] == "team"
    assert job["metadata"]["ownerReferences"][0]["uid"] == PLACEHOLDER_UID
    assert simulation.service is not None
    assert simulation.service["metadata"]["name"] == "js"


def test_text_shows_dns_names_placement_and_waits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLES / "multislice-exclusive.yaml")]) == 0
    out = capsys.readouterr().out
    assert "multislice-slice-0-0.multislice multislice-slice-0-1.multislice" in out
    assert "exclusive per cloud.google.com/gke-nodepool (affinity strategy)" in out
    assert "podAntiAffinity (required) per cloud.google.com/gke-nodepool" in out
    assert main(["plan", str(EXAMPLES / "depends-on.yaml")]) == 0
    out = capsys.readouterr().out
    assert "trainer: dependsOn initializer Complete" in out
    assert "once the Jobs of initializer succeeded" in out


def test_yaml_and_json_print_the_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "volume-claim-policies.yaml")
    assert main(["plan", "-o", "yaml", "-n", "team", path]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    kinds = [doc["kind"] for doc in documents]
    assert kinds[0] == "Service"
    assert kinds.count("PersistentVolumeClaim") == 2
    assert kinds[-1] == "Job"
    assert {doc["metadata"]["namespace"] for doc in documents} == {"team"}
    assert main(["plan", "-o", "json", path]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["kind"] == "List"
    assert [item["kind"] for item in listing["items"]] == kinds


INVALID = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: bad}
spec:
  replicatedJobs:
    - name: workers
      groupName: Not_A_Label
      template: {spec: {template: {spec: {containers: [{name: c, image: busybox}]}}}}
"""


def test_invalid_input_gives_validate_lines_and_exit_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(INVALID)
    assert main(["validate", str(manifest)]) == 1
    validate_lines = capsys.readouterr().out.splitlines()
    assert main(["plan", str(manifest)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == validate_lines
    assert "spec.replicatedJobs[0].groupName" in captured.err
    assert captured.out == ""


def test_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["plan", str(tmp_path / "missing.yaml")]) == 2


def test_a_suspended_jobset_with_deferred_children_plans_nothing_until_its_first_resume() -> None:
    queued = jobset(replicatedJobs=[{"name": "a", "replicas": 2}], suspend=True)
    simulation = simulate(queued, namespace="ns", now=NOW, defer_children=True)
    assert simulation.passes == ()
    assert simulation.service is None
    assert simulation.not_created == ("js-a-0", "js-a-1")
    assert "created at its first resume" in simulation.outcome
    upstream = simulate(queued, namespace="ns", now=NOW)
    created([["js-a-0", "js-a-1"]], upstream)


def test_plan_command_takes_defer_children(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "queued.yaml"
    body = jobset(replicatedJobs=[{"name": "a"}], suspend=True).to_dict()
    manifest.write_text(yaml.safe_dump({"apiVersion": "jobset.x-k8s.io/v1alpha2", **body}))
    assert main(["plan", "--defer-children", str(manifest)]) == 0
    assert "created at its first resume" in capsys.readouterr().out


GANG = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: train}
spec:
  scheduling:
    replicatedJobs:
      - targetReplicatedJobs: [leader]
        schedulingPolicy: {basic: {}}
      - targetReplicatedJobs: [workers]
  replicatedJobs:
    - name: leader
      template: {spec: {template: {spec: {containers: [{name: c, image: busybox}]}}}}
    - name: workers
      replicas: 2
      template:
        spec:
          parallelism: 4
          completions: 4
          template: {spec: {containers: [{name: c, image: busybox}]}}
"""
GATE = "JobSetWorkloadAwareSchedulingAPI=true"


def test_plan_shows_the_workload_and_pod_groups_with_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "gang.yaml"
    manifest.write_text(GANG)
    assert main(["plan", "--feature-gates", GATE, str(manifest)]) == 0
    out = capsys.readouterr().out
    assert "Workload train-" in out
    assert "template leader  basic" in out
    assert "template workers  gang minCount 8" in out
    assert "      podGroup train-workers-" in out
    assert main(["plan", "--feature-gates", GATE, "-o", "yaml", str(manifest)]) == 0
    kinds = [doc["kind"] for doc in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["Service", "Workload", "PodGroup", "PodGroup", "Job", "Job", "Job"]


def test_validate_and_plan_refuse_scheduling_with_the_gate_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "gang.yaml"
    manifest.write_text(GANG)
    assert main(["validate", str(manifest)]) == 1
    assert "JobSetWorkloadAwareSchedulingAPI feature gate is disabled" in capsys.readouterr().out
    assert main(["plan", str(manifest)]) == 1
    assert "spec.scheduling: Forbidden" in capsys.readouterr().err
