"""A real etcd + kube-apiserver on loopback, for integration tests and the dev loop.

Why real: the behaviour this controller depends on (CRD schema validation and defaulting, CEL
rules, status subresource, resourceVersion conflicts, watch semantics, RBAC) lives in the API
server. A fake would test our assumptions instead of Kubernetes.

Lifetime: `start()` creates a temporary directory holding keys, data and logs, starts etcd and then
the apiserver on free ports, waits for /readyz, writes an admin kubeconfig, and installs the CRDs
(waiting until they are Established and served). `stop()` (also on `with` exit, on interpreter exit,
and via the kernel if Python is killed) stops every process it started and removes the directory
unless `keep_workdir` is set.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from jobset_controller_dev.envtest.binaries import (
    INTEGRATION_COMPONENTS,
    ensure_binaries,
    kube_version,
    repo_root,
)
from jobset_controller_dev.envtest.pki import (
    CertificateAuthority,
    CertPair,
    write_service_account_keys,
)
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port

SERVICE_CIDR = "10.0.0.0/24"
_FIELD_MANAGER = "jobset-envtest"

# What the audit log records: every request made by a ServiceAccount (the identity the controller
# runs as in least-privilege tests), at Metadata level (who, verb, resource, response code; never
# bodies), and nothing else, so the file stays small while kwok and the controller-manager are busy.
_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


class ControlPlaneError(RuntimeError):
    """A component did not start or did not become ready; the message carries its log tail."""


def default_crd_paths() -> list[Path]:
    root = repo_root()
    if root is None:
        return []
    return sorted((root / "manifests" / "crd" / "bases").glob("*.yaml"))


# Kubernetes 1.37's Workload-Aware Scheduling: GenericWorkload (beta, off by default) makes the
# apiserver able to serve scheduling.k8s.io/v1beta1 and turns on kube-scheduler's GangScheduling
# plugin; the API group itself is off by default too (a beta API), hence the runtime-config.
WORKLOAD_API_FEATURE_GATES: tuple[tuple[str, bool], ...] = (("GenericWorkload", True),)
WORKLOAD_API_RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
WORKLOAD_API_SINCE = (1, 37)


class ControlPlane:
    """etcd + kube-apiserver with RBAC on, an admin identity, and the project's CRDs installed."""

    # The binaries this control plane runs (subclasses that run more components extend it).
    components: tuple[str, ...] = INTEGRATION_COMPONENTS

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        crd_paths: Sequence[Path] | None = None,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        ready_timeout: float = 90.0,
        bind_address: str = "127.0.0.1",
        advertise_address: str = "127.0.0.1",
        workload_api: bool = False,
    ) -> None:
        """`bind_address`/`advertise_address`: where kube-apiserver listens and what it publishes
        as the `kubernetes` Service's endpoint. Loopback by default; pods on a real node cannot
        reach 127.0.0.1 (their own loopback), so the real-node tier binds 0.0.0.0 inside its
        private network namespace and advertises the node's address there. This process always
        talks to it on 127.0.0.1.

        `ready_timeout`: seconds each component, CRD or node may take to be ready (scaled:
        `polling.scaled`, by `_wait` and `_wait_crd_served`).

        `workload_api`: serve scheduling.k8s.io/v1beta1 (Workload, PodGroup; Kubernetes 1.37,
        beta and off by default): the gate and the API group that gang scheduling needs
        (`WORKLOAD_API_FEATURE_GATES`, given to every Kubernetes component this cluster runs).
        Off by default, as on a cluster nobody configured for it."""
        self._bin_dir = bin_dir
        self.workload_api = workload_api
        self.bind_address = bind_address
        self.advertise_address = advertise_address
        self._crd_paths = list(crd_paths) if crd_paths is not None else default_crd_paths()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="jobset-envtest-"))
        self._keep_workdir = keep_workdir
        self._ready_timeout = ready_timeout
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self.etcd_endpoint = ""
        self.server = ""
        self.kubeconfig = self.workdir / "kubeconfig"
        self.audit_log = self.workdir / "audit.log"
        self._ssl: ssl.SSLContext | None = None
        self._apiserver_port = 0

    # ----------------------------------------------------------------------- lifecycle
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = ensure_binaries(self.components)
        return self._bin_dir

    def start(self) -> Self:
        try:
            if self.workload_api and kube_version(self.bin_dir) < WORKLOAD_API_SINCE:
                # The gate and the API group do not exist before 1.37: the apiserver would exit on
                # its flags. Say why instead (JOBSET_K8S_BIN pointing at older binaries, say).
                raise ControlPlaneError(
                    f"workload_api needs Kubernetes >= 1.37; {self.bin_dir} holds "
                    f"{'.'.join(map(str, kube_version(self.bin_dir)))}"
                )
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self.install_crds(self._crd_paths)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in (self.apiserver, self.etcd):
            if proc is not None:
                proc.stop()
        if self._own_workdir and not self._keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_apiserver(self) -> None:
        """Stop and start the apiserver on the same port (watches see their connection drop).

        Call it from the main thread. The new process gets the parent-death signal, which the
        kernel sends when the THREAD that started it ends: started from a worker thread (say
        asyncio.to_thread, whose pool is shut down with each test's event loop), the apiserver
        would be killed under every later test.
        """
        self._require_main_thread()  # before the stop: refused, it leaves the apiserver running
        self.stop_apiserver()
        self.spawn_apiserver()
        self.wait_apiserver_ready()

    @staticmethod
    def _require_main_thread() -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ControlPlaneError("the apiserver must be started from the main thread")

    def stop_apiserver(self) -> None:
        """Stop the apiserver (any thread): the first step of `restart_apiserver` in pieces."""
        assert self.apiserver is not None
        self.apiserver.stop()

    def spawn_apiserver(self) -> None:
        """Start the apiserver again on its port without waiting for it (the main thread, as
        `restart_apiserver`). An asyncio caller waits with `asyncio.to_thread(
        wait_apiserver_ready)`, so its own loop (a webhook forwarder, watches, a supervisor)
        keeps running while the apiserver comes up, as everything around a real one does."""
        self._require_main_thread()
        self._spawn_apiserver(port=self._apiserver_port)

    def wait_apiserver_ready(self, timeout: float | None = None) -> None:
        """Until /readyz answers 200 (any thread); past `timeout` s (default: the ready timeout;
        scaled), ControlPlaneError with the checks that failed and the apiserver's log."""
        assert self.apiserver is not None
        self._wait(
            self.apiserver,
            lambda: self._get_status("/readyz") == 200,
            "kube-apiserver /readyz",
            timeout,
            state=self._readyz_failures,
        )

    # ----------------------------------------------------------------------- components
    def _write_pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.ca = CertificateAuthority(pki)
        self.serving = self.ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=tuple(dict.fromkeys(("127.0.0.1", "10.0.0.1", self.advertise_address))),
            server=True,
        )
        self.admin = self.ca.issue("admin", common_name="admin", organizations=("system:masters",))
        self.service_account = write_service_account_keys(pki)

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_endpoint = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.etcd = ManagedProcess(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=envtest",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_endpoint}",
                f"--advertise-client-urls={self.etcd_endpoint}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=envtest={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            self.workdir / "etcd.log",
        )
        self.etcd.start()
        self._wait(
            self.etcd,
            lambda: self._etcd_health() == 200,
            "etcd /health",
            state=lambda: f"/health answers {self._etcd_health() or 'nothing'}",
        )

    def _etcd_health(self) -> int:
        """The HTTP status of etcd's /health; 0 when it does not answer (in 2 s, scaled)."""
        host, port = self.etcd_endpoint.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=scaled(2))
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status
        except OSError:
            return 0
        finally:
            conn.close()

    def _start_apiserver(self, port: int | None = None) -> None:
        self._spawn_apiserver(port)
        self.wait_apiserver_ready()

    def _spawn_apiserver(self, port: int | None = None) -> None:
        self._apiserver_port = port or free_port()
        self.server = f"https://127.0.0.1:{self._apiserver_port}"
        pki = self.workdir / "pki"
        self.apiserver = ManagedProcess(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_endpoint}",
                f"--bind-address={self.bind_address}",
                f"--advertise-address={self.advertise_address}",
                *self._endpoint_reconciler_args(),
                # Logs, exec and port-forward reach a kubelet by the node's InternalIP, never by
                # its hostname: resolving that would ask the host's DNS server.
                "--kubelet-preferred-address-types=InternalIP",
                f"--secure-port={self._apiserver_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={self.serving.cert}",
                f"--tls-private-key-file={self.serving.key}",
                f"--client-ca-file={self.ca.pair.cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.service_account.cert}",
                f"--service-account-signing-key-file={self.service_account.key}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                f"--audit-policy-file={self._write_audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                *self.feature_gate_args(),
                *(["--runtime-config=" + WORKLOAD_API_RUNTIME_CONFIG] if self.workload_api else []),
                "--v=1",
            ],
            self.workdir / "kube-apiserver.log",
        )
        self.apiserver.start()

    def _readyz_failures(self) -> str:
        """What the apiserver's verbose /readyz says is not ready yet (its "[-]" checks)."""
        try:
            status, body = self._request_once("GET", "/readyz?verbose", None, "application/json")
        except (OSError, ssl.SSLError) as error:
            return f"/readyz does not answer: {error}"
        failing = [line for line in str(body.get("raw", "")).splitlines() if "[-]" in line]
        return f"/readyz answers {status}" + (f": {'; '.join(failing)}" if failing else "")

    def _endpoint_reconciler_args(self) -> list[str]:
        """Kubernetes 1.37 refuses to start when the address it would publish as the `default/
        kubernetes` Service's endpoint is a loopback one ("may not be in the loopback range").
        On loopback nothing in the cluster can use that endpoint anyway (no pod reaches this
        host's 127.0.0.1), so such a control plane publishes none; the real-node tier advertises
        its node address and keeps the lease reconciler."""
        if ipaddress.ip_address(self.advertise_address).is_loopback:
            return ["--endpoint-reconciler-type=none"]
        return []

    def feature_gate_args(self) -> list[str]:
        """The ``--feature-gates`` flag every Kubernetes component of this cluster gets."""
        if not self.workload_api:
            return []
        gates = ",".join(f"{name}={str(on).lower()}" for name, on in WORKLOAD_API_FEATURE_GATES)
        return [f"--feature-gates={gates}"]

    def _write_audit_policy(self) -> Path:
        path = self.workdir / "audit-policy.yaml"
        path.write_text(yaml.safe_dump(_AUDIT_POLICY, sort_keys=False))
        return path

    def audit_files(self) -> list[Path]:
        """The audit log's files, oldest first: the API server moves the log aside as
        `audit-<time>.log` each time it reaches 100 MiB (`--audit-log-maxsize`'s default), and
        an hour of churn writes several."""
        rotated = sorted(self.audit_log.parent.glob("audit-*.log"))
        return rotated + ([self.audit_log] if self.audit_log.exists() else [])

    def audit_events(self, user: str | None = None) -> list[dict[str, Any]]:
        """The audit log's events so far (one per request and stage), optionally for one user.

        Blocking mode means a request's event is in the file before its response is sent, so
        everything a finished call did is here. A watch still open has only its ResponseStarted
        event, so that stage is kept too: count requests by ``auditID``, not by event.
        """
        return list(self.iter_audit_events(user))

    def iter_audit_events(self, user: str | None = None) -> Iterator[dict[str, Any]]:
        """`audit_events`, read a line at a time: an hour of churn writes hundreds of MiB, and
        a line that does not name `user` is not decoded."""
        for path in self.audit_files():
            with path.open() as lines:
                for line in lines:
                    if not line.strip() or (user is not None and user not in line):
                        continue
                    event = json.loads(line)
                    if event.get("stage") not in ("ResponseStarted", "ResponseComplete", "Panic"):
                        continue
                    if user is not None and event.get("user", {}).get("username") != user:
                        continue
                    yield event

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """Create (if missing) ServiceAccount `namespace/name`, mint a token for it with the
        TokenRequest API (valid a day), and write a kubeconfig that authenticates with it.

        This is how a test runs the controller with exactly the permissions the shipped roles
        grant: its username is `system:serviceaccount:<namespace>:<name>`.
        """
        self.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"metadata": {"name": name}},
        )
        status, body = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},
            },
        )
        if status != 201:
            raise ControlPlaneError(
                f"token request for {namespace}/{name} failed ({status}): {body}"
            )
        return self._write_config(path, name, {"token": body["status"]["token"]})

    def _wait(
        self,
        proc: ManagedProcess,
        ready: Callable[[], object],
        what: str,
        timeout: float | None = None,
        *,
        state: Callable[[], str] | None = None,
    ) -> None:
        """Poll `ready()` until it holds, for `timeout` s (default: the ready timeout), scaled
        here (`polling.scaled`), once. Fail at once if `proc` exits first; past the bound, the
        error names `what`, the state it last saw (`state()`, when given) and `proc`'s log."""
        bound = self._ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + scaled(bound)
        while time.monotonic() < deadline:
            if not proc.running():
                raise ControlPlaneError(f"{proc.name} exited before {what}:\n{proc.log_tail()}")
            if ready():
                return
            time.sleep(0.2)
        seen = f" ({state()})" if state is not None else ""
        raise ControlPlaneError(
            f"{what} not ready within {scaled(bound):g} s{seen}:\n{proc.log_tail()}"
        )

    # ----------------------------------------------------------------------- admin access
    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.ca.pair.cert))
            ctx.load_cert_chain(str(self.admin.cert), str(self.admin.key))
            self._ssl = ctx
        return self._ssl

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
    ) -> tuple[int, dict[str, Any]]:
        """One admin request; returns (HTTP status, decoded JSON body or {}).

        Connection errors are retried for a few seconds (10, scaled): right after a (re)start
        the apiserver can reset connections for a moment even though /readyz already answered.
        """
        deadline = time.monotonic() + scaled(10.0)
        while True:
            try:
                return self._request_once(method, path, body, content_type)
            except (ConnectionError, ssl.SSLError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _request_once(
        self, method: str, path: str, body: Any, content_type: str
    ) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self._apiserver_port, context=self._ssl_context(), timeout=scaled(30)
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": content_type, "Accept": "application/json"}
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError:
            decoded = {"raw": raw.decode(errors="replace")}
        return response.status, decoded if isinstance(decoded, dict) else {"items": decoded}

    def _get_status(self, path: str) -> int:
        try:
            return self._request_once("GET", path, None, "application/json")[0]
        except (OSError, ssl.SSLError):
            return 0

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(self.kubeconfig, self.admin, user="admin")

    def write_kubeconfig(self, path: Path, client: CertPair, *, user: str) -> Path:
        """Write a kubeconfig for this apiserver that authenticates with `client` (a CA-issued
        client certificate); the admin kubeconfig is one of these."""
        return self._write_config(
            path, user, {"client-certificate": str(client.cert), "client-key": str(client.key)}
        )

    def _write_config(self, path: Path, user: str, credentials: dict[str, str]) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.ca.pair.cert),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user}}],
            "current-context": "envtest",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    # What tests and the controllers they run leave in a namespace, emptied before it is deleted.
    _NAMESPACED_WORKLOADS = (
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
        "/apis/batch/v1/namespaces/{ns}/jobs",
        "/api/v1/namespaces/{ns}/pods",
        "/api/v1/namespaces/{ns}/services",
        "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    )

    def delete_namespace(self, name: str) -> None:
        """Empty a namespace of the workloads tests create, then delete it.

        Why empty it first: a control plane without kube-controller-manager has no namespace
        controller (nor garbage collector), so a deleted namespace stays Terminating for good with
        everything in it, and every controller a later test starts reconciles those leftovers.
        Measured: tests/integration/test_jobset_controller.py took 26 s alone and 330 s after a
        module had left two JobSets of 30 Jobs each in Terminating namespaces (each new
        controller's creates of their Jobs were refused there, retried and evented, spending the
        client's request budget the test's own JobSet needed)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "propagationPolicy": "Background"}  # fmt: skip
        for collection in self._NAMESPACED_WORKLOADS:
            self.request("DELETE", collection.format(ns=name), options)
        self.request("DELETE", f"/api/v1/namespaces/{name}")

    def kubectl(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        """Run the same-version kubectl against this control plane (for up to 120 s, scaled);
        returns stdout."""
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
            timeout=scaled(120),
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout if check else result.stdout + result.stderr

    def etcdctl(self, *args: str) -> str:
        result = subprocess.run(
            [str(self.bin_dir / "etcdctl"), f"--endpoints={self.etcd_endpoint}", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=scaled(60),
        )
        return result.stdout

    # ----------------------------------------------------------------------- CRDs
    def install_crds(self, paths: Iterable[Path]) -> None:
        """Server-side apply each CRD, then wait until it is Established and its API is served."""
        crds = [
            doc
            for path in paths
            for doc in yaml.safe_load_all(path.read_text())
            if doc and doc.get("kind") == "CustomResourceDefinition"
        ]
        for crd in crds:
            name = crd["metadata"]["name"]
            status, body = self.request(
                "PATCH",
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                f"?fieldManager={_FIELD_MANAGER}&force=true",
                crd,
                content_type="application/apply-patch+yaml",
            )
            if status >= 300:
                raise ControlPlaneError(f"installing CRD {name} failed ({status}): {body}")
        for crd in crds:
            self._wait_crd_served(crd)

    def _wait_crd_served(self, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        # List the storage version: objects stored in it need no conversion, so a CRD whose
        # conversion webhook is not up yet (Kueue's, between two Kueue runs) still answers.
        served = [v for v in crd["spec"]["versions"] if v.get("served")]
        version = next((v["name"] for v in served if v.get("storage")), served[0]["name"])
        deadline = time.monotonic() + scaled(self._ready_timeout)
        conditions: list[dict[str, Any]] = []
        listed = 0
        while time.monotonic() < deadline:
            _, body = self.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conditions = (body.get("status") or {}).get("conditions") or []
            established = any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            )
            listed = self._get_status(f"/apis/{group}/{version}/{plural}?limit=1")
            if established and listed == 200:
                return
            time.sleep(0.1)
        seen = [f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in conditions]
        raise ControlPlaneError(
            f"CRD {name} not established and served within {scaled(self._ready_timeout):g} s "
            f"(conditions: {seen or 'none'}; list of {version} {plural} answered {listed})"
        )
