"""Which replica the soak takes for the leader, read from what each life logged."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobset_controller_dev.soak.replicas import OURS, Replica


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    """A replica of ours whose life is a sleeping process logging to `logs[-1]`."""
    replica = Replica(OURS, 0, tmp_path / "kubeconfig", tmp_path, tmp_path)
    replica.logs.append(tmp_path / "ours-0-life0.log")
    replica.lives = 1
    replica.logs[-1].write_text("")
    replica.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield replica
    replica.proc.kill()
    replica.proc.wait()


def log(replica: Replica, line: str) -> None:
    with replica.logs[-1].open("a") as out:
        out.write(line)


def test_a_replica_leads_once_it_logged_so(replica: Replica) -> None:
    assert not replica.leads()
    log(replica, '{"logger":"leaderelection","msg":"attempting to acquire leader lease"}\n')
    assert not replica.leads()
    log(replica, '{"logger":"leaderelection","msg":"became leader"}\n')
    assert replica.leads()


def test_a_deposed_replica_still_running_is_no_leader(replica: Replica) -> None:
    # Ours writes its recorded Events for up to 45 s after losing the Lease, then exits 1.
    log(replica, '{"logger":"leaderelection","msg":"became leader"}\n')
    assert replica.leads()
    log(replica, '{"logger":"manager","msg":"leader election lost, exiting"}\n')
    assert not replica.leads()


def test_a_line_still_being_written_is_read_once_it_is_whole(replica: Replica) -> None:
    log(replica, '{"logger":"leaderelection","msg":"became')
    assert not replica.leads()
    log(replica, ' leader"}\n')
    assert replica.leads()
