"""The image tier: the controller's images as built for release (hack/image.sh), each run here
with podman: this machine's architecture natively, the other one (arm64 on amd64, amd64 on
arm64) under Debian's qemu-user-static run directly on the image's Python (hack/qemu.sh; nothing
registered with the kernel). One local control plane (etcd + kube-apiserver) for the tier: the
containers share this machine's network, so they reach it on 127.0.0.1.

`hack/test.sh` builds both images and fetches the emulator before pytest (exports JOBSET_IMAGE,
the manifest list, whose per-architecture images are `<list>-<arch>`, and JOBSET_QEMU_BIN); run
alone, the fixtures do it. Podman needs root here: without it the tier fails, it does not skip.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from jobset_controller.manager.environment import go_arch
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.binaries import repo_root
from jobset_controller_dev.envtest.processes import free_port, wait_healthy
from jobset_controller_dev.image.containers import Image, stop

# The architectures the tier runs: the release's (hack/release.sh builds the same list).
ARCHES = ("amd64", "arm64")


def _script(*argv: str) -> str:
    root = repo_root()
    assert root is not None
    return subprocess.run(
        [str(root / "hack" / argv[0]), *argv[1:]], capture_output=True, text=True, check=True
    ).stdout.split()[-1]


@pytest.fixture(scope="package")
def images() -> dict[str, Image]:
    """Every architecture's image, by architecture."""
    name = os.environ.get("JOBSET_IMAGE") or _script("image.sh", "--arch", ",".join(ARCHES))
    qemu = Path(os.environ.get("JOBSET_QEMU_BIN") or _script("qemu.sh"))
    return {arch: Image(f"{name}-{arch}", arch, qemu) for arch in ARCHES}


@pytest.fixture(scope="package")
def native(images: dict[str, Image]) -> Image:
    return images[go_arch()]


@pytest.fixture(scope="package")
def emulated(images: dict[str, Image]) -> Image:
    (other,) = (image for arch, image in images.items() if arch != go_arch())
    return other


@pytest.fixture(scope="package")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        yield plane


def readable_dir(path: Path) -> Path:
    """A directory the image's user (65532) can read, as a Secret or ConfigMap mount is."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def share(path: Path) -> Path:
    """Make a file readable by the image's user; returns it."""
    path.chmod(0o644)
    return path


@pytest.fixture(scope="package")
def service_account(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount: a token, the
    cluster's CA and the namespace, of a ServiceAccount bound to cluster-admin (what it may do is
    the least-privilege tests' subject, not this tier's)."""
    namespace = f"image-{uuid.uuid4().hex[:6]}"
    directory = readable_dir(tmp_path_factory.mktemp("serviceaccount"))
    config = control_plane.service_account_kubeconfig(
        namespace, "controller", directory / "kubeconfig"
    )
    token = yaml.safe_load(config.read_text())["users"][0]["user"]["token"]
    config.unlink()
    status, body = control_plane.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"{namespace}-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": namespace}],
        },
    )
    assert status == 201, body
    (directory / "token").write_text(token)
    (directory / "namespace").write_text(namespace)
    (directory / "ca.crt").write_bytes(control_plane.ca.cert_pem)
    for name in ("token", "namespace", "ca.crt"):
        share(directory / name)
    return directory


class InCluster:
    """`jobset-controller run` in an image as the shipped Deployment runs it (in-cluster
    credentials from the mounted ServiceAccount, leader election on, the webhook server with a
    certificate the cluster's CA issued), against the tier's control plane; stderr in `log`."""

    def __init__(
        self,
        image: Image,
        control_plane: ControlPlane,
        service_account: Path,
        workdir: Path,
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.image, self.log = image, workdir / "controller.log"
        self.name = f"jobset-image-test-{uuid.uuid4().hex[:8]}"
        self.health, self.metrics, self.webhook = free_port(), free_port(), free_port()
        config = readable_dir(workdir / "config")
        certs = readable_dir(workdir / "certs")
        pair = control_plane.ca.write_pair(
            certs, "webhook", common_name="webhook", ip_addresses=("127.0.0.1",), server=True
        )
        share(pair.cert), share(pair.key)
        (config / "config.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": True},
                    "webhook": {"host": "127.0.0.1", "port": self.webhook, "certDir": "/certs"},
                    "internalCertManagement": {"enable": False},
                }
            )
        )
        share(config / "config.yaml")
        port = control_plane.server.rsplit(":", 1)[1]
        self.namespace = (service_account / "namespace").read_text()
        self.process = image.popen(
            "jobset-controller",
            "run",
            "--config=/config/config.yaml",
            f"--metrics-bind-address=127.0.0.1:{self.metrics}",
            f"--health-probe-bind-address=127.0.0.1:{self.health}",
            name=self.name,
            mounts={
                service_account: "/var/run/secrets/kubernetes.io/serviceaccount",
                config: "/config",
                certs: "/certs",
            },
            env={
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": port,
                "POD_NAMESPACE": self.namespace,
                **(env or {}),
            },
            stderr=self.log,
        )

    def wait_ready(self, within: float) -> None:
        wait_healthy(
            self.health,
            running=lambda: self.process.poll() is None,
            exited=lambda: AssertionError(f"exited {self.process.poll()}: {self.tail()}"),
            late=lambda seen: AssertionError(f"{seen}: {self.tail()}"),
            within=within,
            interval=0.2,
        )

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> int:
        return stop(self.name, self.process)
