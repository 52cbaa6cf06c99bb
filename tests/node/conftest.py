"""The real-node tier: one node (kubelet + containerd + kube-proxy + CoreDNS) and the control plane
in namespaces of their own, shared by every test under tests/node (envtest/realnode.py).

The controller comes from the release's files as a user gets them (hack/release.sh: `manifests.yaml`
with the image pinned, the packaged chart, the images' OCI archive, imported into the node's
containerd with `ctr images import` as a registry pull would put it there). test.sh makes them
before pytest and exports JOBSET_RELEASE_DIR and JOBSET_IMAGE_ARCHIVES (the pause image's archive,
then the release's); run alone, the fixture makes them. Between the node's start
and stop the test thread is inside the node's network namespace: everything the tests reach
(the API server, Services through kube-proxy) is there, nothing else.

The tier skips, with one line, only where the machine cannot run it (not root, a tool missing).
Its teardown fails if the node left a process, a cgroup, a host iptables rule, a host network
interface or a host mount behind.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobset_controller_dev.envtest.realnode import RealNode, unavailable
from jobset_controller_dev.image.release import Release, release_files


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
def release() -> Release:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    return release_files()


@pytest.fixture(scope="package")
def node(release: Release) -> Iterator[RealNode]:
    before = _host_state()
    real = RealNode(images=release.archives).start()
    try:
        yield real
    finally:
        real.stop()
        assert real.leftovers() == []
        after = _host_state()
        for what in before:
            assert after[what] == before[what], f"the node changed the host's {what}"


@pytest.fixture(scope="package")
def image(release: Release) -> str:
    return release.image
