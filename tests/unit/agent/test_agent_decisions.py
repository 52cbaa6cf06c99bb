"""The in-place restart agent's decisions and environment (issue 25), as upstream's agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobset_controller.agent import (
    Annotate,
    Env,
    EnvError,
    Exit,
    Lift,
    annotation_patch,
    decide,
    read_env,
)


def jobset(
    *, current: int | None = None, previous: int | None = None, strategy: str = "InPlaceRestart"
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if current is not None:
        status["currentInPlaceRestartAttempt"] = current
    if previous is not None:
        status["previousInPlaceRestartAttempt"] = previous
    return {
        "metadata": {"name": "js", "namespace": "ns"},
        "spec": {"failurePolicy": {"restartStrategy": strategy}},
        "status": status,
    }


def test_a_new_jobset_is_joined_at_attempt_zero() -> None:
    assert decide(jobset(), None, True, 1) == Annotate(0)


def test_a_restarted_pod_joins_the_attempt_after_the_current_one() -> None:
    assert decide(jobset(current=3, previous=2), None, True, 1) == Annotate(4)


def test_an_attempt_at_or_below_previous_exits_with_the_restart_code() -> None:
    assert decide(jobset(current=3, previous=3), 3, False, 42) == Exit(42)
    assert decide(jobset(current=3, previous=4), 3, True, 42) == Exit(42)


def test_the_barrier_lifts_when_every_pod_reached_the_agents_attempt() -> None:
    assert decide(jobset(current=4, previous=3), 4, True, 1) == Lift()


def test_the_barrier_holds_until_then_and_lifts_once() -> None:
    assert decide(jobset(current=3, previous=3), 4, True, 1) is None
    assert decide(jobset(current=4, previous=3), 4, False, 1) is None


def test_the_disable_annotation_or_another_strategy_lifts_at_once() -> None:
    disabled = jobset()
    disabled["metadata"]["annotations"] = {"jobset.sigs.k8s.io/disable-in-place-restart": ""}
    assert decide(disabled, None, True, 1) == Lift()
    assert decide(jobset(strategy="Recreate"), None, True, 1) == Lift()
    assert decide(jobset(strategy="Recreate"), None, False, 1) is None


def test_the_annotation_is_applied_on_the_agents_own_pod() -> None:
    env = Env("ns", "js", "js-w-0-0-abc", 1)
    assert annotation_patch(env, 2) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "js-w-0-0-abc",
            "namespace": "ns",
            "annotations": {"jobset.sigs.k8s.io/in-place-restart-attempt": "2"},
        },
    }


@pytest.fixture
def namespace_file(tmp_path: Path) -> str:
    path = tmp_path / "namespace"
    path.write_text("team-a")
    return str(path)


def test_the_environment_defaults_to_sidecar_mode(namespace_file: str) -> None:
    env = read_env({"JOBSET_NAME": "js", "POD_NAME": "p"}, namespace_file)
    assert env == Env("team-a", "js", "p", 1, "", "/barrier-is-down", 8081)
    assert env.sidecar


def test_a_worker_command_selects_main_container_mode(namespace_file: str) -> None:
    environ = {"JOBSET_NAME": "js", "POD_NAME": "p", "WORKER_COMMAND": "train"}
    env = read_env({**environ, "IN_PLACE_RESTART_EXIT_CODE": "42"}, namespace_file)
    assert (env.worker_command, env.exit_code, env.sidecar) == ("train", 42, False)


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"POD_NAME": "p"}, "JOBSET_NAME must be set"),
        ({"JOBSET_NAME": "js"}, "POD_NAME must be set"),
        ({"JOBSET_NAME": "js", "POD_NAME": "p", "IN_PLACE_RESTART_EXIT_CODE": "x"}, "integer"),
        ({"JOBSET_NAME": "js", "POD_NAME": "p", "WORKER_COMMAND": "w", "STARTUP_PROBE_PORT": "1"},
         "cannot be set with"),
        ({"JOBSET_NAME": "js", "POD_NAME": "p", "STARTUP_PROBE_PORT": "http"}, "port number"),
    ],
)  # fmt: skip
def test_a_bad_environment_is_one_error(
    namespace_file: str, environ: dict[str, str], words: str
) -> None:
    with pytest.raises(EnvError, match=words):
        read_env(environ, namespace_file)


def test_a_missing_namespace_file_names_the_likely_cause(tmp_path: Path) -> None:
    with pytest.raises(EnvError, match="automountServiceAccountToken"):
        read_env({"JOBSET_NAME": "js", "POD_NAME": "p"}, str(tmp_path / "absent"))


def test_the_controller_command_runs_the_agent(tmp_path: Path, capsys: Any) -> None:
    from jobset_controller.cli import main

    assert main(["agent", "--namespace-file", str(tmp_path / "absent")]) == 1
    assert "in-place-restart-agent: cannot read the namespace file" in capsys.readouterr().err
