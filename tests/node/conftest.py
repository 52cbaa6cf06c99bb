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

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from jobset_controller import __version__
from jobset_controller_dev.envtest.binaries import cache_root, repo_root
from jobset_controller_dev.envtest.realnode import RealNode, unavailable


@dataclass(frozen=True)
class Release:
    """The release's files the tier installs from, and the image they pin."""

    directory: Path
    archives: list[Path]  # to import into the node's containerd: pause first

    @property
    def manifests(self) -> Path:
        return self.directory / "manifests.yaml"

    @property
    def chart(self) -> Path:
        (chart,) = self.directory.glob("jobset-controller-*.tgz")
        return chart

    @property
    def image(self) -> str:
        """The image the manifests pin, by tag (the JobSets' pods run it too)."""
        for document in yaml.safe_load_all(self.manifests.read_text()):
            if document and document["kind"] == "Deployment":
                pinned: str = document["spec"]["template"]["spec"]["containers"][0]["image"]
                return pinned.split("@", 1)[0]
        raise AssertionError(f"{self.manifests}: no Deployment")


def _release() -> Release:
    directory = os.environ.get("JOBSET_RELEASE_DIR")
    archives = os.environ.get("JOBSET_IMAGE_ARCHIVES")
    if directory and archives:
        return Release(Path(directory), [Path(path) for path in archives.split(":")])
    root = repo_root()
    assert root is not None
    out = cache_root() / "release"
    subprocess.run(
        [str(root / "hack" / "release.sh"), "--version", f"v{__version__}", "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (oci,) = out.glob("jobset-controller-*.oci.tar")
    return Release(out, [cache_root() / "image" / "pause.tar", oci])


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
    return _release()


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
