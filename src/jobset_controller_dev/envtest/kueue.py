"""Kueue's real manager, run out of cluster against a local control plane (the `kueue` e2e tests).

Why the real one: most JobSet users submit through Kueue, which suspends a new JobSet, admits it,
merges its flavor's node selector into the pod templates, resumes it, suspends it again on
preemption or when pods are not ready in time, and (MultiKueue) dispatches it to another cluster
through `spec.managedBy`. Every one of those steps leans on this controller's wire behaviour, so
only the real Kueue tests it.

What it takes to run Kueue outside a Deployment, and why each piece is here:
- The binary, CRDs and webhook manifests come from `hack/kueue.sh` (built once from the Go module
  proxy, cached next to the Kubernetes binaries). `ensure_kueue()` finds or builds them.
- Webhooks: Kueue's internal certificate management issues certificates for `<svc>.<ns>.svc`,
  which an apiserver cannot reach from here, so it is off. Kueue serves its webhooks on 127.0.0.1
  with a certificate the control plane's CA issues for that IP; the webhook configurations (taken
  from Kueue's generated manifests) point at that URL with the CA as bundle. Only Kueue's own
  kinds and the enabled integrations are registered: a webhook whose handler Kueue did not start
  would fail closed for every object it matches.
- Five Kueue CRDs convert between v1beta1 and v1beta2 through Kueue's `/convert` endpoint; their
  conversion stanza points at the same URL.
- Kueue v0.19 exits at start unless a metrics certificate exists at the fixed path
  `/etc/kueue/metrics/certs/` (even with metrics off). The host's /etc is never touched: Kueue
  starts inside a private mount namespace (`unshare -m --propagation private`) where an overlay
  mounted on /etc adds a `kueue/metrics/certs` directory from the work dir over the host's /etc,
  read-through for everything else. The mount dies with the process. This needs root (or
  CAP_SYS_ADMIN), which the test machines have.
- The beta `VisibilityOnDemand` gate serves an aggregated API that would need an APIService
  pointing at Kueue; it is off.
- Kueue acts as the admin (like kwok); leader election is off; health probes on a free port.

Processes are `ManagedProcess`es: parent-death signal, atexit, explicit stop.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import yaml

from jobset_controller_dev.envtest.binaries import cache_root, repo_root
from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port

KUEUE_VERSION = "v0.19.2"

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/v1beta2"
KUEUE_API = f"/apis/{KUEUE_API_VERSION}"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
MULTIKUEUE_CHECK_CONTROLLER = "kueue.x-k8s.io/multikueue"

JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
JOB_FRAMEWORK = "batch/job"
# (API group, resource) that each integration's webhooks match; used to pick which of Kueue's
# generated webhooks to register.
_FRAMEWORK_RESOURCES = {
    JOBSET_FRAMEWORK: ("jobset.x-k8s.io", "jobsets"),
    JOB_FRAMEWORK: ("batch", "jobs"),
}

# The CRDs Kueue's kustomization patches with a conversion webhook (v1beta1 <-> v1beta2).
CONVERSION_CRDS = (
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
)

# Where Kueue insists on finding its metrics certificate (relative to /etc).
_METRICS_CERTS_UNDER_ETC = Path("kueue/metrics/certs")

# Runs as `sh -c` inside the private mount namespace: lay the overlay over /etc, then become Kueue.
_MOUNT_AND_EXEC = (
    'mount -t overlay kueue-etc -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc || exit 97\n'
    'shift 2\nexec "$@"\n'
)


class KueueMissing(RuntimeError):
    """Kueue is not cached and cannot be built from here."""


def kueue_home(bin_dir: Path) -> Path:
    """The version directory holding bin/, crd/ and webhook/ (hack/kueue.sh's layout)."""
    return bin_dir.parent


def _complete(bin_dir: Path) -> bool:
    home = kueue_home(bin_dir)
    return (
        os.access(bin_dir / "kueue", os.X_OK)
        and (home / "crd").is_dir()
        and (home / "webhook" / "manifests.yaml").is_file()
    )


def ensure_kueue() -> Path:
    """Return Kueue's bin directory, building it once (minutes) with hack/kueue.sh if needed.

    Order: JOBSET_KUEUE_BIN, the version-keyed cache, then the script (which prints progress).
    """
    explicit = os.environ.get("JOBSET_KUEUE_BIN")
    if explicit and _complete(Path(explicit)):
        return Path(explicit)
    cached = cache_root() / f"kueue-{KUEUE_VERSION}" / "bin"
    if _complete(cached):
        return cached
    root = repo_root()
    if root is None:
        raise KueueMissing(
            f"Kueue {KUEUE_VERSION} not found in {cached}; set JOBSET_KUEUE_BIN or run "
            "hack/kueue.sh from a source checkout."
        )
    result = subprocess.run(
        [str(root / "hack" / "kueue.sh")],
        env=dict(os.environ, KUEUE_VERSION=KUEUE_VERSION),
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise KueueMissing(f"hack/kueue.sh failed with exit code {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])


def kueue_crds(bin_dir: Path, webhook_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs, the conversion ones pointed at `webhook_url`/convert."""
    crds: list[dict[str, Any]] = []
    for path in sorted((kueue_home(bin_dir) / "crd").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            if doc["metadata"]["name"] in CONVERSION_CRDS:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": {
                            "url": f"{webhook_url}/convert",
                            "caBundle": base64.b64encode(ca_bundle).decode(),
                        },
                    },
                }
            crds.append(doc)
    return crds


def _matches_only(webhook: Mapping[str, Any], allowed: set[tuple[str, str]]) -> bool:
    """Whether every (group, resource) a webhook's rules name is in `allowed` ("" group = core)."""
    pairs = {
        (group, resource)
        for rule in webhook.get("rules") or ()
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
    }
    return bool(pairs) and all(
        group == KUEUE_GROUP or (group, resource) in allowed for group, resource in pairs
    )


def webhook_configurations(
    bin_dir: Path,
    webhook_url: str,
    ca_bundle: bytes,
    frameworks: Sequence[str],
    name_prefix: str = "kueue-envtest",
) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, body) of Kueue's mutating and validating configurations: Kueue's own
    kinds plus the enabled integrations, each pointed at `webhook_url` + its path."""
    allowed = {_FRAMEWORK_RESOURCES[f] for f in frameworks if f in _FRAMEWORK_RESOURCES}
    manifest = (kueue_home(bin_dir) / "webhook" / "manifests.yaml").read_text()
    out: list[tuple[str, dict[str, Any]]] = []
    for doc in yaml.safe_load_all(manifest):
        if not doc:
            continue
        kind = doc["kind"]
        hooks = []
        for hook in doc.get("webhooks") or ():
            if not _matches_only(hook, allowed):
                continue
            hook = dict(hook)
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"{webhook_url}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            hooks.append(hook)
        plural = "mutatingwebhookconfigurations"
        if kind == "ValidatingWebhookConfiguration":
            plural = "validatingwebhookconfigurations"
        suffix = "mutating" if kind == "MutatingWebhookConfiguration" else "validating"
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": f"{name_prefix}-{suffix}"},
            "webhooks": hooks,
        }
        out.append((f"/apis/admissionregistration.k8s.io/v1/{plural}", body))
    return out


def inline_kubeconfig(cluster: ControlPlane) -> str:
    """An admin kubeconfig for `cluster` with every credential inline (base64 data, no paths).

    Why: MultiKueue refuses a worker kubeconfig that names files (certificate-authority,
    tokenFile): it is read from a Secret in the manager, where the manager's paths mean nothing.
    """

    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "worker",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority-data": base64.b64encode(cluster.ca.cert_pem).decode(),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": data(cluster.admin.cert),
                    "client-key-data": data(cluster.admin.key),
                },
            }
        ],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": "admin"}}],
        "current-context": "worker",
    }
    return yaml.safe_dump(config, sort_keys=False)


class Kueue:
    """Kueue's manager against `cluster`, with its CRDs and webhooks installed.

    `frameworks`: the integrations enabled (JobSet and batch/Job by default).
    `wait_for_pods_ready`: Kueue's `waitForPodsReady` section, or None for off.
    `config`: further Configuration keys merged over the defaults (e.g. `multiKueue`).
    `feature_gates`: gates on top of VisibilityOnDemand=false.
    """

    def __init__(
        self,
        cluster: ControlPlane,
        *,
        frameworks: Sequence[str] = (JOBSET_FRAMEWORK, JOB_FRAMEWORK),
        wait_for_pods_ready: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        namespace: str = "kueue-system",
        bin_dir: Path | None = None,
        ready_timeout: float = 90.0,
    ) -> None:
        self.cluster = cluster
        self.frameworks = tuple(frameworks)
        self.wait_for_pods_ready = dict(wait_for_pods_ready) if wait_for_pods_ready else None
        self.extra_config = dict(config or {})
        self.feature_gates = {"VisibilityOnDemand": False, **(feature_gates or {})}
        self.namespace = namespace
        self._bin_dir = bin_dir
        self.ready_timeout = ready_timeout
        self.workdir = cluster.workdir / "kueue"
        self.process: ManagedProcess | None = None
        self.webhook_port = 0
        self.health_port = 0
        self.startup_seconds = 0.0
        self._webhook_paths: list[str] = []
        self.config_path = self.workdir / "config.yaml"

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = ensure_kueue()
        return self._bin_dir

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kueue.log"

    # ----------------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        began = time.monotonic()
        try:
            self._prepare()
            self.process = ManagedProcess("kueue", self._argv(), self.log_path, env=self._env())
            self.process.start()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop Kueue and unregister its webhooks (a stopped webhook would fail closed)."""
        if self.process is not None:
            self.process.stop()
        for path in self._webhook_paths:
            self.cluster.request("DELETE", path)
        self._webhook_paths = []

    # ----------------------------------------------------------------------- pieces
    def _prepare(self) -> None:
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        certs = self.workdir / "webhook-certs"
        certs.mkdir(parents=True)
        self.webhook_port = free_port()
        self.health_port = free_port()
        ca = self.cluster.ca
        ca.write_pair(
            certs,
            "kueue-webhook",
            common_name="kueue-webhook",
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        # The overlay's upper layer: only kueue/metrics/certs, shown over the host's /etc.
        metrics = self.workdir / "etc-upper" / _METRICS_CERTS_UNDER_ETC
        metrics.mkdir(parents=True)
        ca.write_pair(
            metrics,
            "kueue-metrics",
            common_name="kueue-metrics",
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        (self.workdir / "etc-work").mkdir()

        self.cluster.request("POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        self.config_path.write_text(yaml.safe_dump(self.configuration(), sort_keys=False))
        crd_dir = self.workdir / "crds"
        crd_dir.mkdir()
        paths = []
        for crd in kueue_crds(self.bin_dir, self.webhook_url, ca.cert_pem):
            path = crd_dir / f"{crd['metadata']['name']}.yaml"
            path.write_text(yaml.safe_dump(crd, sort_keys=False))
            paths.append(path)
        self.cluster.install_crds(paths)
        for collection, body in webhook_configurations(
            self.bin_dir, self.webhook_url, ca.cert_pem, self.frameworks
        ):
            name = body["metadata"]["name"]
            self.cluster.request("DELETE", f"{collection}/{name}")
            status, reply = self.cluster.request("POST", collection, body)
            if status != 201:
                raise ControlPlaneError(f"registering {name} failed ({status}): {reply}")
            self._webhook_paths.append(f"{collection}/{name}")

    def configuration(self) -> dict[str, Any]:
        """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for this run."""
        config: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": self.namespace,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": str(self.workdir / "webhook-certs"),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 100, "burst": 200},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(self.frameworks)},
            "featureGates": dict(self.feature_gates),
        }
        if self.wait_for_pods_ready is not None:
            config["waitForPodsReady"] = dict(self.wait_for_pods_ready)
        config.update(self.extra_config)
        return config

    def _argv(self) -> list[str]:
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            _MOUNT_AND_EXEC,
            "kueue-mount",
            str(self.workdir / "etc-upper"),
            str(self.workdir / "etc-work"),
            str(self.bin_dir / "kueue"),
            f"--config={self.config_path}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            "--zap-log-level=2",
        ]

    def _env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))

    def _health(self, path: str) -> str:
        """How `path` on the health port answers ("200", "503", or the error); in 2 s, scaled."""
        try:
            url = f"http://127.0.0.1:{self.health_port}{path}"
            with urllib.request.urlopen(url, timeout=scaled(2)) as reply:
                return str(reply.status)
        except urllib.error.HTTPError as error:
            return str(error.code)
        except (OSError, urllib.error.URLError) as error:
            return f"no answer ({error})"

    def _wait_ready(self) -> None:
        """/readyz (the webhook server listens), then a dry-run create that goes through
        Kueue's ResourceFlavor webhooks, proving the apiserver reaches them: within the ready
        timeout, scaled here (`polling.scaled`); the error says which step it last saw fail."""
        assert self.process is not None
        probe = {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": "kueue-envtest-probe"},
        }
        deadline = time.monotonic() + scaled(self.ready_timeout)
        last = ""
        while time.monotonic() < deadline:
            if not self.process.running():
                raise ControlPlaneError(f"kueue exited:\n{self.process.log_tail(40)}")
            readyz = self._health("/readyz")
            last = f"/readyz: {readyz}"
            if readyz == "200":
                status, reply = self.cluster.request(
                    "POST", f"{KUEUE_API}/resourceflavors?dryRun=All", probe
                )
                if status == 201:
                    return
                last = f"dry-run ResourceFlavor: {status} {reply.get('message', reply)}"
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kueue not ready within {scaled(self.ready_timeout):g} s ({last}):\n"
            f"{self.process.log_tail(40)}"
        )

    def log_tail(self, lines: int = 30) -> str:
        return self.process.log_tail(lines) if self.process else ""
