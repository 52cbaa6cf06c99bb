"""The local control plane's API server restart, in pieces for an asyncio caller."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError


class StoppableProcess:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_restart_from_a_worker_thread_is_refused_before_the_apiserver_is_stopped(
    tmp_path: Path,
) -> None:
    # The new process would die with the worker thread (parent-death signal); refusing only
    # after the stop would leave the cluster without an API server.
    plane = ControlPlane(workdir=tmp_path, crd_paths=[])
    process = StoppableProcess()
    plane.apiserver = process  # type: ignore[assignment]
    with ThreadPoolExecutor(1) as pool, pytest.raises(ControlPlaneError, match="main thread"):
        pool.submit(plane.restart_apiserver).result()
    assert not process.stopped
