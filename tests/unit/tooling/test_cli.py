"""`jobset-controller validate`: offline defaulting + validation of manifests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobset_controller import __version__
from jobset_controller.cli import build_parser, main

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


def test_version_flag_and_subcommand_both_print_the_package_version_and_exit_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    flag = capsys.readouterr().out
    assert main(["version"]) == 0
    assert flag == capsys.readouterr().out == f"{__version__}\n"


def test_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--kube-api-qps", "lots"], "argument --kube-api-qps: invalid float value: 'lots'"),
        (["run", "--leader-elect=maybe"], "argument --leader-elect: invalid boolean value 'maybe'"),
        (
            ["run", "--early-job-conditions=soon"],
            "argument --early-job-conditions: invalid boolean value 'soon'",
        ),
        (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["run", "--zap-encoder=xml"], "argument --zap-encoder: invalid choice: 'xml'"),
        (["run", "--zap-stacktrace-level=warn"], "argument --zap-stacktrace-level: invalid"),
        (["run", "--zap-time-encoding=unix"], "argument --zap-time-encoding: invalid choice"),
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


def test_upstreams_zap_flags_are_accepted() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "--zap-log-level=2",
            "--zap-devel=false",
            "--zap-encoder=json",
            "--zap-stacktrace-level=error",
            "--zap-time-encoding=rfc3339nano",
        ]
    )
    assert (args.zap_encoder, args.zap_stacktrace_level, args.zap_time_encoding) == (
        "json",
        "error",
        "rfc3339nano",
    )


@pytest.mark.parametrize(
    ("flags", "given"),
    [([], None), (["--early-job-conditions"], True), (["--early-job-conditions=false"], False)],
)
def test_early_job_conditions_flag_overrides_the_configuration_only_when_given(
    flags: list[str], given: bool | None
) -> None:
    from jobset_controller.config import Configuration, EarlyJobConditions
    from jobset_controller.manager import ManagerOptions

    args = build_parser().parse_args(["run", *flags])
    assert args.early_job_conditions is given
    on_in_file = Configuration(early_job_conditions=EarlyJobConditions(enable=True))
    options = ManagerOptions(config=on_in_file, early_job_conditions=args.early_job_conditions)
    assert options.effective_early_job_conditions is (True if given is None else given)


def test_missing_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["run", f"--kubeconfig={missing}"]) == 2
    assert capsys.readouterr().err == f"jobset-controller: --kubeconfig {missing}: no such file\n"


# --- malformed input: one line per error, exit 1, never a traceback ------------------------------

VALID_HEAD = "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\n"


def run_validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(text)
    code = main(["validate", str(manifest)])
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output
    for line in output.splitlines():
        assert line.startswith(f"{manifest}: "), line
    return code, output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- 1\n- 2\n", 'document 1: Invalid value: "array": a JobSet manifest must be an object'),
        ("42\n", "document 1: Invalid value: 42: a JobSet manifest must be an object"),
        ("just text\n", 'document 1: Invalid value: "just text": a JobSet manifest must be'),
        (VALID_HEAD + "metadata: 5\n", "metadata: Invalid value: 5: Input should be a valid"),
        (VALID_HEAD + "metadata: [a]\n", 'metadata: Invalid value: "array": Input should be'),
        (VALID_HEAD + "metadata: {name: x}\nspec: 3\n", "JobSet x: spec: Invalid value: 3: "),
        (
            VALID_HEAD + "metadata: {name: x}\nspec: {replicatedJobs: [null]}\n",
            'JobSet x: spec.replicatedJobs[0]: Invalid value: "null": Input should be',
        ),
        ("kind: JobSet\n", "apiVersion: Required value: must be jobset.x-k8s.io/v1alpha2"),
        ("kind: JobSet\n", "metadata.name: Required value: name or generateName is required"),
        ("apiVersion: v1\n", "kind: Required value: must be JobSet"),
        (
            "apiVersion: jobset.x-k8s.io/v1\nkind: JobSet\nmetadata: {name: x}\n",
            'apiVersion: Invalid value: "jobset.x-k8s.io/v1": must be jobset.x-k8s.io/v1alpha2',
        ),
        ("[" * 600 + "]" * 600 + "\n", "cannot check: nested too deeply"),
        (
            VALID_HEAD + "metadata: {name: x, labels: {a: " + "[" * 150 + "]" * 150 + "}}\n",
            "must not be nested more than 100 levels deep",
        ),
        (
            VALID_HEAD + "metadata: {name: x}\nspec: {replicas: 1" + "0" * 5000 + "}\n",
            "cannot check",
        ),
        (
            VALID_HEAD + "metadata: {name: Bad_Name}\n",
            'metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain',
        ),
        (
            VALID_HEAD + "metadata: {name: x, labels: {'a/b/c': v}}\n",
            'metadata.labels: Invalid value: "a/b/c": a valid label key must consist of',
        ),
        (
            VALID_HEAD + "metadata: {name: x, namespace: a.b}\n",
            'metadata.namespace: Invalid value: "a.b": must not contain dots',
        ),
        (VALID_HEAD + 'metadata: {name: "a\\nb"}\n', 'Invalid value: "a\\nb"'),
    ],
)
def test_malformed_documents_are_one_line_errors_and_exit_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    code, output = run_validate(tmp_path, text, capsys)
    assert code == 1
    assert expected in output


def test_annotations_over_256_kib_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = yaml.safe_load((EXAMPLES / "pytorch-workers.yaml").read_text())
    manifest["metadata"]["annotations"] = {"big": "x" * (256 * 1024 - 3)}
    assert run_validate(tmp_path, yaml.safe_dump(manifest), capsys)[0] == 0
    manifest["metadata"]["annotations"]["big"] += "x"
    code, output = run_validate(tmp_path, yaml.safe_dump(manifest), capsys)
    assert code == 1
    assert output.strip().endswith(
        "JobSet pytorch-workers: metadata.annotations: Too long: may not be more than 262144 bytes"
    )


def test_explicit_nulls_read_as_absent_like_the_api_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLES / "pytorch-workers.yaml").read_text()
    manifest = yaml.safe_load(text)
    manifest["metadata"].update(annotations=None, labels={"team": None}, finalizers=None)
    manifest["spec"].update(network=None, successPolicy=None, suspend=None)
    manifest["status"] = "ignored on create"
    code, output = run_validate(tmp_path, yaml.safe_dump(manifest), capsys)
    assert (code, output.strip()) == (
        0,
        f"{tmp_path / 'manifest.yaml'}: JobSet pytorch-workers: valid",
    )


def test_nulls_do_not_loosen_required_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = yaml.safe_load((EXAMPLES / "pytorch-workers.yaml").read_text())
    manifest["spec"]["replicatedJobs"][0]["name"] = None
    manifest["spec"]["replicatedJobs"][0]["template"] = None
    code, output = run_validate(tmp_path, yaml.safe_dump(manifest), capsys)
    assert code == 1
    assert "spec.replicatedJobs[0].name: Required value" in output
    assert "spec.replicatedJobs[0].template: Required value" in output


def test_timestamps_stay_strings_as_in_the_api_servers_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = yaml.safe_load((EXAMPLES / "pytorch-workers.yaml").read_text())
    text = yaml.safe_dump(manifest) + "\n"
    text = text.replace("metadata:\n", "metadata:\n  creationTimestamp: 2025-01-01T00:00:00Z\n", 1)
    assert run_validate(tmp_path, text, capsys)[0] == 0


def test_other_kinds_and_empty_documents_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    assert run_validate(tmp_path, text, capsys) == (0, "")


def test_unreadable_yaml_is_a_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "broken.yaml"
    manifest.write_text("a: [unclosed\n")
    assert main(["validate", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"{manifest}: cannot read: ")
    manifest.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["validate", str(manifest)]) == 2


def test_a_negative_burst_with_a_qps_limit_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--kube-api-burst=-1"]) == 2
    assert capsys.readouterr().err == (
        "jobset-controller: --kube-api-burst: a negative burst (-1) with a QPS limit (500)"
        " allows nothing\n"
    )


def test_a_negative_burst_in_the_config_file_names_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("clientConnection:\n  burst: -1\n")
    assert main(["run", f"--config={config}"]) == 2
    assert capsys.readouterr().err == (
        f"jobset-controller: --config {config}: clientConnection.burst: a negative burst (-1)"
        " with a QPS limit (500) allows nothing\n"
    )
