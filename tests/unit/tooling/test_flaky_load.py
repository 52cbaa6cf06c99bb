"""hack/flaky.py's CPU load ends with the hunter, however the hunter ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.unit.tooling.hack_scripts import HACK

# A hunter in miniature: the load of hack/flaky.py, its burners' pids printed, then waiting.
HUNTER = """
import sys, time
sys.path.insert(0, {hack!r})
import flaky
with flaky.cpu_load(2) as burners:
    print(" ".join(str(b.pid) for b in burners), flush=True)
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
def test_the_load_ends_when_the_hunter_is_killed(sig: signal.Signals) -> None:
    hunter = subprocess.Popen(
        [sys.executable, "-c", HUNTER.format(hack=str(HACK))],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert hunter.stdout is not None
    pids = [int(p) for p in hunter.stdout.readline().split()]
    assert len(pids) == 2
    assert all(alive(p) for p in pids)
    os.kill(hunter.pid, sig)
    hunter.wait(30)
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the condition, bounded by the deadline
    assert not any(alive(p) for p in pids)
