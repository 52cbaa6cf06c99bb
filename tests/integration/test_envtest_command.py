"""The foreground control-plane command, and that it never leaves processes behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import processes_mentioning


def start_command() -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobset_controller_dev.envtest"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the control plane is ready
    assert line.startswith("export KUBECONFIG="), line
    return proc, Path(line.strip().removeprefix("export KUBECONFIG="))


def assert_all_gone(marker: str, within: float = 15.0) -> None:
    """Every process whose command line mentions `marker` exits within `within` s (scaled)."""
    poll(
        lambda: not processes_mentioning(marker),
        f"every process of {marker} gone",
        within,
        state=lambda: f"still running: {processes_mentioning(marker)}",
    )


@pytest.fixture
def command() -> Iterator[tuple[subprocess.Popen[str], Path]]:
    proc, kubeconfig = start_command()
    try:
        yield proc, kubeconfig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(kubeconfig.parent, ignore_errors=True)


def test_ctrl_c_stops_everything_and_removes_the_directory(
    command: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, kubeconfig = command
    workdir = str(kubeconfig.parent)
    assert processes_mentioning(workdir), "etcd and kube-apiserver should be running"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=scaled(30)) == 0
    assert_all_gone(workdir)
    assert not kubeconfig.parent.exists()


def test_children_die_with_a_killed_parent(
    command: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, kubeconfig = command
    workdir = str(kubeconfig.parent)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert_all_gone(workdir)


def test_printed_kubeconfig_gives_admin_access(
    command: tuple[subprocess.Popen[str], Path],
) -> None:
    from jobset_controller_dev.envtest import ensure_binaries

    _, kubeconfig = command
    result = subprocess.run(
        [
            str(ensure_binaries() / "kubectl"),
            f"--kubeconfig={kubeconfig}",
            "auth",
            "can-i",
            "*",
            "*",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=scaled(60),
    )
    assert result.stdout.strip() == "yes"
