"""The real-node tier: one node (kubelet + containerd + kube-proxy + CoreDNS) and the control plane
in namespaces of their own, shared by every test under tests/node (envtest/realnode.py).

The image comes from `hack/image.sh` (test.sh builds it before pytest and exports
JOBSET_IMAGE / JOBSET_IMAGE_ARCHIVES; run alone, the fixture builds it). Between the node's start
and stop the test thread is inside the node's network namespace: everything the tests reach
(the API server, Services through kube-proxy) is there, nothing else.

The tier skips, with one line, only where the machine cannot run it (not root, a tool missing).
Its teardown fails if the node left a process, a cgroup, a host iptables rule, a host network
interface or a host mount behind.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobset_controller_dev.envtest.binaries import repo_root
from jobset_controller_dev.envtest.realnode import RealNode, unavailable


def _image() -> tuple[str, list[Path]]:
    """(the controller image's name, the archives to import: pause first)."""
    name = os.environ.get("JOBSET_IMAGE")
    archives = os.environ.get("JOBSET_IMAGE_ARCHIVES")
    if name and archives:
        return name, [Path(path) for path in archives.split(":")]
    root = repo_root()
    assert root is not None
    lines = subprocess.run(
        [str(root / "hack" / "image.sh")], capture_output=True, text=True, check=True
    ).stdout.split()
    return lines[-1], [Path(lines[-3]), Path(lines[-2])]


def _host_state() -> dict[str, str]:
    """What a node must not change on the host: its rules, interfaces and mounts."""

    def out(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    mounts = Path("/proc/self/mountinfo").read_text()
    return {
        "iptables": out("iptables-save"),
        "links": out("ip", "-o", "link", "show"),
        "mounts": "\n".join(" ".join(line.split()[3:5]) for line in mounts.splitlines()),
    }


@pytest.fixture(scope="package")
def controller_image() -> tuple[str, list[Path]]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    return _image()


@pytest.fixture(scope="package")
def node(controller_image: tuple[str, list[Path]]) -> Iterator[RealNode]:
    before = _host_state()
    real = RealNode(images=controller_image[1]).start()
    try:
        yield real
    finally:
        real.stop()
        assert real.leftovers() == []
        after = _host_state()
        for what in before:
            assert after[what] == before[what], f"the node changed the host's {what}"


@pytest.fixture(scope="package")
def image(controller_image: tuple[str, list[Path]]) -> str:
    return controller_image[0]
