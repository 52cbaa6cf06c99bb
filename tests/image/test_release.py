"""The release's files (hack/release.sh) agree with each other and with the images: what
`manifests.yaml` pins is the archive's multi-architecture image, the packaged chart's default
image is the release's, the SBOM lists what the image holds, and SHA256SUMS covers every file.
The node tier installs from the same files; these checks say which file is wrong when it fails."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator

import pytest
import yaml

from jobset_controller import __version__
from jobset_controller_dev.image import oci
from jobset_controller_dev.image.containers import Image, Mounted, mounted, unmount
from jobset_controller_dev.image.release import Release, release_files

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def release() -> Release:
    return release_files()


def test_the_manifests_pin_the_archives_multi_architecture_image_by_digest(
    release: Release,
) -> None:
    first_line = release.manifests.read_text().splitlines()[0]
    assert "kubectl apply --server-side -f manifests.yaml" in first_line
    repository_tag, _, digest = release.pinned_image().partition("@")
    assert repository_tag.endswith(f"/jobset-controller:{release.version}")
    assert digest == oci.digest(release.oci_archive)
    assert oci.platforms(release.oci_archive) == ["linux/amd64", "linux/arm64"]
    with tarfile.open(release.oci_archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert index["manifests"][0]["annotations"][oci.REF_NAME] == repository_tag


def test_the_cert_manager_manifests_pin_the_same_image(release: Release) -> None:
    text = (release.directory / "manifests-certmanager.yaml").read_text()
    images = {
        container["image"]
        for document in yaml.safe_load_all(text)
        if document and document["kind"] == "Deployment"
        for container in document["spec"]["template"]["spec"]["containers"]
    }
    assert images == {release.pinned_image()}
    assert any(
        document and document["kind"] == "Certificate" for document in yaml.safe_load_all(text)
    )


def test_the_packaged_charts_default_image_is_the_releases(release: Release) -> None:
    with tarfile.open(release.chart) as tar:
        chart = yaml.safe_load(tar.extractfile("jobset-controller/Chart.yaml"))  # type: ignore[arg-type]
        values = yaml.safe_load(tar.extractfile("jobset-controller/values.yaml"))  # type: ignore[arg-type]
    assert (chart["version"], chart["appVersion"]) == (__version__, release.version)
    assert release.chart.name == f"jobset-controller-{__version__}.tgz"
    # the chart's tag defaults to its appVersion: repository:appVersion is the pinned tag
    assert f"{values['image']['repository']}:{chart['appVersion']}" == release.image
    assert values["image"]["tag"] == ""


def test_sha256sums_cover_every_file_of_the_release(release: Release) -> None:
    listed = {}
    for line in (release.directory / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.lstrip("*")] = digest
    files = {
        path.name
        for path in release.directory.iterdir()
        if path.is_file() and not path.name.startswith(".") and path.name != "SHA256SUMS"
    }
    assert set(listed) == files
    for name, digest in listed.items():
        assert hashlib.sha256((release.directory / name).read_bytes()).hexdigest() == digest, name


@pytest.fixture(scope="module")
def native_files(native: Image) -> Iterator[Mounted]:
    try:
        yield mounted(native.name)
    finally:
        unmount(native.name)


def test_the_sbom_lists_every_python_package_in_the_image(
    release: Release, native_files: Mounted
) -> None:
    bom = json.loads(release.sbom.read_text())
    assert bom["bomFormat"] == "CycloneDX"
    assert (bom["metadata"]["component"]["name"], bom["metadata"]["component"]["version"]) == (
        "jobset-controller",
        __version__,
    )
    listed = {component["name"].lower().replace("_", "-") for component in bom["components"]}
    site = native_files.python_dirs()[1]
    installed = {
        path.name.split("-", 1)[0].lower().replace("_", "-") for path in site.glob("*.dist-info")
    }
    assert installed - {"jobset-controller"} == listed
