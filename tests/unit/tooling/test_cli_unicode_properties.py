"""Property: ``validate``, ``plan`` and ``status`` answer any text in a manifest or an argument in
lines, never with a traceback: lone surrogates, non-BMP characters, control characters.

Why: the JSON ``"\\ud800\\udc00"`` (one valid character, U+10000) once reached the name checks as
two lone surrogates and died there with a UnicodeEncodeError. A manifest is written as JSON (every
non-ASCII character escaped, so non-BMP ones become surrogate-pair escapes and lone surrogates
lone escapes) or as YAML (double-quoted escapes), with the drawn text at the places the code reads
first: the name, a label, a replicatedJob's name. ``status`` gets the text as its name, namespace
and context, against a stand-in API server on 127.0.0.1 that answers 404 to everything.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobset_controller.cli import main
from jobset_controller.tools.documents import load_json_documents, not_utf8_field

# Every code point, surrogates included (hypothesis leaves category Cs out unless told).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def jobset(text: str, where: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "ok"}
    rjob: dict[str, Any] = {
        "name": "w",
        "replicas": 1,
        "template": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}},
    }
    if where == "name":
        metadata["name"] = text
    elif where == "label":
        metadata["labels"] = {text: text}
    else:
        rjob["name"] = text
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": [rjob]},
    }


def write(tmp_path: Path, document: dict[str, Any], as_json: bool) -> Path:
    """JSON with ASCII escapes (lone surrogates stay escapes) or YAML, which JSON also is."""
    path = tmp_path / ("manifest.json" if as_json else "manifest.yaml")
    path.write_text(json.dumps(document, ensure_ascii=True))
    return path


def assert_lines(output: str, code: int, allowed: tuple[int, ...]) -> None:
    assert code in allowed, output
    assert "Traceback" not in output
    assert all(line.isprintable() for line in output.splitlines()), output


@SETTINGS
@given(text=ANY_TEXT, where=st.sampled_from(["name", "label", "rjob"]), as_json=st.booleans())
@example(text="\U00010000", where="name", as_json=True)
@example(text="\ud800", where="name", as_json=True)
@example(text="\udc00\ud800", where="label", as_json=False)
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_manifests_with_any_text_are_answered_in_lines(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    text: str,
    where: str,
    as_json: bool,
) -> None:
    path = write(tmp_path, jobset(text, where), as_json)
    code = main([command, str(path)])
    captured = capsys.readouterr()
    output = captured.err if command == "plan" else captured.out + captured.err
    assert_lines(output, code, (0, 1))
    for line in output.splitlines():
        assert line.startswith(f"{path}: "), line
    try:
        text.encode()
    except UnicodeEncodeError:
        assert code == 1
        assert "not valid UTF-8 text" in output


def test_a_json_surrogate_pair_is_one_character_and_a_lone_one_is_named_by_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps(jobset("\U00010000", "name"), ensure_ascii=True))
    assert "\\ud800\\udc00" in pair.read_text()
    assert load_json_documents(pair.read_text())[0]["metadata"]["name"] == "\U00010000"
    assert main(["validate", str(pair)]) == 1
    assert 'metadata.name: Invalid value: "\U00010000"' in capsys.readouterr().out

    lone = tmp_path / "lone.json"
    lone.write_text(json.dumps(jobset("a\ud800", "rjob"), ensure_ascii=True))
    assert main(["validate", str(lone)]) == 1
    assert capsys.readouterr().out == (
        f"{lone}: document 1: spec.replicatedJobs[0].name: not valid UTF-8 text\n"
    )


def test_the_field_walk_names_keys_and_survives_depth() -> None:
    assert not_utf8_field({"metadata": {"labels": {"\ud800": "x"}}}) == "metadata.labels: a key"
    deep: Any = "\udfff"
    for _ in range(5000):
        deep = [deep]
    assert not_utf8_field(deep) == "[0]" * 5000
    assert not_utf8_field({"a": ["b", {"c": "\U0001f600"}]}) is None


def test_a_json_file_is_a_stream_of_values_and_nan_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = tmp_path / "two.json"
    stream.write_text(json.dumps(jobset("a", "name")) + "\n" + json.dumps(jobset("B", "name")))
    assert main(["validate", str(stream)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{stream}: JobSet a: valid"
    assert out[1].startswith(f"{stream}: JobSet B: metadata.name: Invalid value")
    nan = tmp_path / "nan.json"
    nan.write_text('{"kind": "JobSet", "spec": NaN}')
    assert main(["validate", str(nan)]) == 2
    assert capsys.readouterr().err.startswith(f"{nan}: cannot read: NaN is not JSON")


@SETTINGS
@given(name=ANY_TEXT)
def test_any_file_name_is_answered_in_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code = main(["validate", str(tmp_path / f"missing-{name}.json")])
    assert_lines(capsys.readouterr().err, code, (2,))


class _NotFound(http.server.BaseHTTPRequestHandler):
    """An API server that has nothing: 404 with a Status, as kube-apiserver answers."""

    def do_GET(self) -> None:
        body = json.dumps(
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound"}
        ).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path_factory.mktemp("status") / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    yield path
    server.shutdown()
    server.server_close()
    thread.join()


@SETTINGS
@given(text=ANY_TEXT, flag=st.sampled_from(["name", "--namespace", "--context"]))
@example(text="\udcff", flag="name")
@example(text="a b/../x\r\nHost: y", flag="name")
@example(text="\U0001f600", flag="--namespace")
@example(text="-:", flag="--namespace")  # looks like an option: argparse's usage error, exit 2
@example(text="-:", flag="name")
@example(text="-\ud800", flag="name")  # argparse quotes it: a lone surrogate stderr cannot encode
@example(text="-\ud7fc", flag="name")  # ... and a non-printable character
def test_status_answers_any_name_namespace_or_context_in_a_line(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str], text: str, flag: str
) -> None:
    argv = ["status", "--kubeconfig", str(kubeconfig)]
    argv += [text] if flag == "name" else ["some-jobset", flag, text]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse refuses an argument that looks like an option
        code = exit_.code if isinstance(exit_.code, int) else -1
    captured = capsys.readouterr()
    assert_lines(captured.out + captured.err, code, (0, 1, 2))
