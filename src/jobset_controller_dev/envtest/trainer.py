"""Kubeflow Trainer's real manager, run out of cluster against a local cluster (the `trainer` tier).

Why Trainer: it is a main way people create JobSets without writing them. Its controller turns a
TrainJob and a (Cluster)TrainingRuntime into a JobSet by server-side apply (field manager
`trainer`), re-applies it while the TrainJob or the JobSet is suspended, and copies the JobSet's
Completed or Failed condition into the TrainJob; its webhook reads the JobSet's
`replicatedJobsStatus`. Every one of those steps leans on this controller's wire behaviour.

What it takes to run Trainer v2.0.0 outside a Deployment, and why each piece is here:
- The binary, CRDs, webhook manifest and ClusterTrainingRuntimes come from `hack/trainer.sh`
  (built once from the Go module proxy, cached beside Kueue). `ensure_trainer()` finds or
  builds them; nothing of Trainer is kept in this repository.
- Certificates: Trainer's rotator would issue a serving certificate for its Service name only,
  which the API server calling 127.0.0.1 rejects; the harness writes the Secret the rotator
  keeps instead (`trainer_certs`), and registers Trainer's validating webhooks by URL on
  127.0.0.1. The rotator then injects that CA into the configuration itself, as in a cluster.
- The rotator waits for the certificate files at the fixed path
  /tmp/k8s-webhook-server/serving-certs (a mounted Secret in a pod), where controller-runtime's
  webhook server reads them too. The host's /tmp is never touched: Trainer starts inside a
  private mount namespace (`unshare -m --propagation private`) where a tmpfs covers /tmp and
  holds only that directory and a kubeconfig with inline credentials; the mount dies with the
  process. This needs root (or CAP_SYS_ADMIN), which the test machines have.
- Trainer has no flag for its webhook server's address, so it listens on all interfaces, on a
  free port; only the API server on 127.0.0.1 calls it. Metrics are off, leader election is off,
  health probes on a free 127.0.0.1 port; it acts as the admin (like Kueue and kwok).
- Trainer v2.0.0 has no Kueue integration of its own, and Kueue v0.19's TrainJob integration
  writes `spec.runtimePatches`, a field of Trainer v2.2's API that v2.0.0's CRD prunes.

Processes are `ManagedProcess`es: parent-death signal, atexit, explicit stop.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Self

import yaml

from jobset_controller_dev.envtest import trainer_certs
from jobset_controller_dev.envtest.binaries import cache_root, repo_root
from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError
from jobset_controller_dev.envtest.kueue import inline_kubeconfig
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port, health_status

TRAINER_VERSION: Final = "v2.0.0"
MANAGER: Final = "trainer-controller-manager"

TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_API_VERSION: Final = f"{TRAINER_GROUP}/v1alpha1"
TRAINER_API: Final = f"/apis/{TRAINER_API_VERSION}"
# Trainer's server-side apply of the JobSet (its reconcileObjects' client.FieldOwner).
FIELD_MANAGER: Final = "trainer"
# The configuration Trainer's rotator injects its CA into (its main.go's constant).
WEBHOOK_CONFIGURATION: Final = "validator.trainer.kubeflow.org"
VALIDATING: Final = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"

# Runs as `sh -c` inside the private mount namespace: read what Trainer needs, cover /tmp with a
# tmpfs holding it, then become Trainer. The binary is held open on fd 3 first, so it runs even
# when the cache lives under /tmp. $1 binary, $2 kubeconfig, $3 tls.crt, $4 tls.key.
_MOUNT_AND_EXEC: Final = """set -e
exec 3<"$1"
kubeconfig=$(cat "$2"); cert=$(cat "$3"); key=$(cat "$4")
shift 4
mount -t tmpfs -o mode=1777,size=8m trainer-tmp /tmp || exit 97
certs=/tmp/k8s-webhook-server/serving-certs
mkdir -p "$certs"
printf '%s\\n' "$kubeconfig" >/tmp/kubeconfig
printf '%s\\n' "$cert" >"$certs/tls.crt"
printf '%s\\n' "$key" >"$certs/tls.key"
exec /proc/self/fd/3 --kubeconfig=/tmp/kubeconfig "$@"
"""


class TrainerMissing(RuntimeError):
    """Trainer is not cached and cannot be built from here."""


def trainer_home(bin_dir: Path) -> Path:
    """The version directory holding bin/, crd/, webhook/ and runtimes/ (hack/trainer.sh's)."""
    return bin_dir.parent


def _complete(bin_dir: Path) -> bool:
    home = trainer_home(bin_dir)
    return (
        os.access(bin_dir / MANAGER, os.X_OK)
        and (home / "crd").is_dir()
        and (home / "webhook" / "manifests.yaml").is_file()
        and (home / "runtimes").is_dir()
    )


def ensure_trainer() -> Path:
    """Return Trainer's bin directory, building it once (minutes) with hack/trainer.sh if needed.

    Order: JOBSET_TRAINER_BIN, the version-keyed cache, then the script (which prints progress
    on stderr and the bin directory last on stdout).
    """
    explicit = os.environ.get("JOBSET_TRAINER_BIN")
    if explicit and _complete(Path(explicit)):
        return Path(explicit)
    cached = cache_root() / f"trainer-{TRAINER_VERSION}" / "bin"
    if _complete(cached):
        return cached
    root = repo_root()
    if root is None:
        raise TrainerMissing(
            f"Trainer {TRAINER_VERSION} not found in {cached}; set JOBSET_TRAINER_BIN or run "
            "hack/trainer.sh from a source checkout."
        )
    result = subprocess.run(
        [str(root / "hack" / "trainer.sh")],
        env=dict(os.environ, TRAINER_VERSION=TRAINER_VERSION),
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise TrainerMissing(f"hack/trainer.sh failed with exit code {result.returncode}")
    bin_dir = Path(result.stdout.strip().splitlines()[-1])
    if not _complete(bin_dir):
        raise TrainerMissing(f"hack/trainer.sh printed {bin_dir}, which is incomplete")
    return bin_dir


def trainer_crds(bin_dir: Path) -> list[Path]:
    """Trainer's CRD files (TrainJob, TrainingRuntime, ClusterTrainingRuntime)."""
    return sorted((trainer_home(bin_dir) / "crd").glob("*.yaml"))


def cluster_training_runtime(bin_dir: Path, name: str) -> dict[str, Any]:
    """One of the ClusterTrainingRuntimes Trainer ships (e.g. torch-distributed,
    mpi-distributed), as its manifest says."""
    for path in sorted((trainer_home(bin_dir) / "runtimes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("metadata", {}).get("name") == name:
                found: dict[str, Any] = doc
                return found
    raise KeyError(f"Trainer ships no runtime named {name}")


def webhook_configuration(bin_dir: Path, url: str, ca_bundle: bytes) -> dict[str, Any]:
    """Trainer's validating webhook configuration, named as its rotator expects, every webhook
    pointed at `url` + its path with `ca_bundle`."""
    manifest = (trainer_home(bin_dir) / "webhook" / "manifests.yaml").read_text()
    (doc,) = [d for d in yaml.safe_load_all(manifest) if d]
    hooks = []
    for hook in doc["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        bundle = base64.b64encode(ca_bundle).decode()
        hooks.append({**hook, "clientConfig": {"url": f"{url}{path}", "caBundle": bundle}})
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": hooks,
    }


class Trainer:
    """Trainer's manager against `cluster`, with its CRDs, webhooks and the ClusterTrainingRuntimes
    named in `runtimes` installed (the JobSet CRD is the cluster's own)."""

    def __init__(
        self,
        cluster: ControlPlane,
        *,
        runtimes: tuple[str, ...] = ("torch-distributed", "mpi-distributed"),
        bin_dir: Path | None = None,
        ready_timeout: float = 90.0,
    ) -> None:
        self.cluster = cluster
        self.runtimes = runtimes
        self._bin_dir = bin_dir
        self.ready_timeout = ready_timeout
        self.workdir = cluster.workdir / "trainer"
        self.process: ManagedProcess | None = None
        self.webhook_port = 0
        self.health_port = 0
        self.startup_seconds = 0.0
        self._registered: list[str] = []

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = ensure_trainer()
        return self._bin_dir

    @property
    def log_path(self) -> Path:
        return self.workdir / "trainer.log"

    # ----------------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        began = time.monotonic()
        try:
            self._prepare()
            self.process = ManagedProcess("trainer", self._argv(), self.log_path)
            self.process.start()
            self._wait_ready()
            for name in self.runtimes:
                self._create(
                    f"{TRAINER_API}/clustertrainingruntimes",
                    cluster_training_runtime(self.bin_dir, name),
                )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop Trainer and unregister its webhooks (a stopped webhook would fail closed)."""
        if self.process is not None:
            self.process.stop()
        for path in self._registered:
            self.cluster.request("DELETE", path)
        self._registered = []

    # ----------------------------------------------------------------------- pieces
    def _create(self, collection: str, body: Mapping[str, Any]) -> None:
        status, reply = self.cluster.request("POST", collection, dict(body))
        if status != 201:
            raise ControlPlaneError(f"creating in {collection} failed ({status}): {reply}")

    def _prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.webhook_port = free_port()
        self.health_port = free_port()
        certificates = trainer_certs.issue()
        (self.workdir / "tls.crt").write_bytes(certificates.cert)
        (self.workdir / "tls.key").write_bytes(certificates.key)
        (self.workdir / "tls.key").chmod(0o600)
        (self.workdir / "kubeconfig").write_text(inline_kubeconfig(self.cluster))
        (self.workdir / "kubeconfig").chmod(0o600)
        self.cluster.install_crds(trainer_crds(self.bin_dir))
        self._create("/api/v1/namespaces", {"metadata": {"name": trainer_certs.NAMESPACE}})
        self._create(f"/api/v1/namespaces/{trainer_certs.NAMESPACE}/secrets", certificates.secret())
        url = f"https://127.0.0.1:{self.webhook_port}"
        self._create(VALIDATING, webhook_configuration(self.bin_dir, url, certificates.ca_cert))
        self._registered.append(f"{VALIDATING}/{WEBHOOK_CONFIGURATION}")

    def _argv(self) -> list[str]:
        return [
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", _MOUNT_AND_EXEC, "trainer-mount",
            str(self.bin_dir / MANAGER),
            str(self.workdir / "kubeconfig"),
            str(self.workdir / "tls.crt"),
            str(self.workdir / "tls.key"),
            f"--webhook-server-port={self.webhook_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            "--metrics-bind-address=0",
            "--leader-elect=false",
            "--zap-log-level=2",
        ]  # fmt: skip

    def _wait_ready(self) -> None:
        """/readyz (certificates injected, the webhook server listening), then a dry-run create
        of a ClusterTrainingRuntime through Trainer's webhook, proving the API server reaches it
        and the handlers are registered (Trainer registers them after /readyz can pass): within
        the ready timeout, scaled here (`polling.scaled`); the error says what it last saw."""
        assert self.process is not None
        probe = {
            "apiVersion": TRAINER_API_VERSION,
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "trainer-envtest-probe"},
            "spec": {"template": {"spec": {"replicatedJobs": []}}},
        }
        deadline = time.monotonic() + scaled(self.ready_timeout)
        last = ""
        while time.monotonic() < deadline:
            if not self.process.running():
                raise ControlPlaneError(f"trainer exited:\n{self.process.log_tail(40)}")
            readyz = health_status(self.health_port, "/readyz")
            last = f"/readyz: {readyz}"
            if readyz == 200:
                status, reply = self.cluster.request(
                    "POST", f"{TRAINER_API}/clustertrainingruntimes?dryRun=All", probe
                )
                if status == 201:
                    return
                last = f"dry-run ClusterTrainingRuntime: {status} {reply.get('message', reply)}"
            time.sleep(0.2)  # poll interval of this readiness wait
        raise ControlPlaneError(
            f"trainer not ready within {scaled(self.ready_timeout):g} s ({last}):\n"
            f"{self.process.log_tail(40)}"
        )

    def log_tail(self, lines: int = 30) -> str:
        return self.process.log_tail(lines) if self.process else ""
