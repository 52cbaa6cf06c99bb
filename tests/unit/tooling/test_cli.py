"""`jobset-controller validate`: offline defaulting + validation of manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobset_controller.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

INVALID = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: bad
spec:
  successPolicy:
    operator: All
    targetReplicatedJobs: [nope]
  replicatedJobs:
    - name: workers
      groupName: Not_A_Label
      template:
        spec:
          template:
            spec:
              containers: [{name: c, image: busybox}]
"""


def test_valid_examples_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "pytorch-workers.yaml")]) == 0
    assert "JobSet pytorch-workers: valid" in capsys.readouterr().out


def test_invalid_jobset_prints_field_paths_and_exits_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(INVALID)
    assert main(["validate", str(manifest)]) == 1
    out = capsys.readouterr().out
    assert "spec.replicatedJobs[0].groupName" in out
    assert "spec.successPolicy.targetReplicatedJobs[0]" in out
    assert "invalid replicatedJob name 'nope' does not appear in .spec.ReplicatedJobs" in out


def test_unknown_feature_gate_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["validate", "--feature-gates", "Bogus=true", str(EXAMPLES / "depends-on.yaml")]
    assert main(args) == 2
    assert "unrecognized feature gate: Bogus" in capsys.readouterr().err


def test_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--kube-api-qps", "lots"], "argument --kube-api-qps: invalid float value: 'lots'"),
        (["run", "--leader-elect=maybe"], "argument --leader-elect: invalid boolean value 'maybe'"),
        (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag_and_exit_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert expected in err


def test_missing_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["run", f"--kubeconfig={missing}"]) == 2
    assert capsys.readouterr().err == f"jobset-controller: --kubeconfig {missing}: no such file\n"
