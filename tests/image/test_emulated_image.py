"""The other architecture's image (arm64 on an amd64 machine) under emulation: Debian's
qemu-user-static runs the image's own Python, with nothing registered with the kernel. Kept to
three short checks (emulation is 5-20 times slower): it starts, it judges a JobSet, and it runs
against a local control plane until /readyz."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.image.conftest import InCluster, readable_dir, share

from jobset_controller import __version__
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.image.containers import Image

pytestmark = pytest.mark.image

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Python's machine name for each architecture: what the emulated process must report.
MACHINES = {"arm64": "aarch64", "amd64": "x86_64", "s390x": "s390x"}


def test_the_emulated_image_runs_its_own_architecture_and_prints_the_version(
    emulated: Image,
) -> None:
    machine = emulated.run("python", "-c", "import platform; print(platform.machine())")
    assert machine.stdout.strip() == MACHINES[emulated.arch], machine.stderr
    version = emulated.run("jobset-controller", "--version")
    assert (version.returncode, version.stdout) == (0, f"{__version__}\n"), version.stderr


def test_the_emulated_image_validates_an_example(emulated: Image, tmp_path: Path) -> None:
    examples = readable_dir(tmp_path / "examples")
    share(Path(shutil.copy(EXAMPLES / "pytorch-workers.yaml", examples)))
    result = emulated.run(
        "jobset-controller",
        "validate",
        "/examples/pytorch-workers.yaml",
        mounts={examples: "/examples"},
    )
    assert result.returncode == 0, result.stderr
    assert "JobSet pytorch-workers: valid" in result.stdout


def test_the_emulated_image_runs_against_a_local_control_plane_until_ready(
    emulated: Image, control_plane: ControlPlane, service_account: Path, tmp_path: Path
) -> None:
    controller = InCluster(emulated, control_plane, service_account, tmp_path)
    try:
        controller.wait_ready(within=240)
    finally:
        code = controller.stop()
    assert code == 0, controller.tail()
