"""A release's files (hack/release.sh), as the node and image tiers read them.

Why one place: the node tier installs from these files as a user would, and the image tier
checks what they pin; both find them the same way (what `hack/test-env.sh` made before pytest,
or made here when a tier runs alone).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from jobset_controller import __version__
from jobset_controller_dev.envtest.binaries import cache_root, repo_root


@dataclass(frozen=True)
class Release:
    """The release's directory, and the image archives to import into a node's containerd
    (the pause image first, then the release's OCI archive)."""

    directory: Path
    archives: list[Path]

    @property
    def version(self) -> str:
        return f"v{__version__}"

    @property
    def manifests(self) -> Path:
        return self.directory / "manifests.yaml"

    @property
    def chart(self) -> Path:
        (chart,) = self.directory.glob("jobset-controller-*.tgz")
        return chart

    @property
    def oci_archive(self) -> Path:
        return self.directory / f"jobset-controller-{self.version}.oci.tar"

    @property
    def sbom(self) -> Path:
        return self.directory / f"jobset-controller-{self.version}.cdx.json"

    def pinned_image(self) -> str:
        """The Deployment's image in `manifests.yaml`: `repository:tag@sha256:...`."""
        for document in yaml.safe_load_all(self.manifests.read_text()):
            if document and document["kind"] == "Deployment":
                pinned: str = document["spec"]["template"]["spec"]["containers"][0]["image"]
                return pinned
        raise AssertionError(f"{self.manifests}: no Deployment")

    @property
    def image(self) -> str:
        """The pinned image by tag (what a JobSet's pods name to run it too)."""
        return self.pinned_image().split("@", 1)[0]


def release_files() -> Release:
    """The release `hack/test-env.sh` made (JOBSET_RELEASE_DIR, JOBSET_IMAGE_ARCHIVES), or one
    made now into the cache's `release/` by hack/release.sh (seconds when nothing changed)."""
    directory = os.environ.get("JOBSET_RELEASE_DIR")
    archives = os.environ.get("JOBSET_IMAGE_ARCHIVES")
    if directory and archives:
        return Release(Path(directory), [Path(path) for path in archives.split(":")])
    root = repo_root()
    if root is None:
        raise RuntimeError("making a release needs the repository (hack/release.sh)")
    out = cache_root() / "release"
    subprocess.run(
        [str(root / "hack" / "release.sh"), "--version", f"v{__version__}", "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    release = Release(out, [])
    return Release(out, [cache_root() / "image" / "pause.tar", release.oci_archive])
