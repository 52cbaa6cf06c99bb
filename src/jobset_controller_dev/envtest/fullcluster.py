"""A full local cluster without containers: the control plane plus controllers, scheduler and nodes.

`FullCluster` is a `ControlPlane` (etcd + kube-apiserver + CRDs) that also runs
- kube-controller-manager with the controllers Jobs depend on (Job, garbage collector,
  EndpointSlice, TTL-after-finished, namespace, service accounts and their tokens, root CA
  publisher, pod GC), each with its own service-account credentials;
- kube-scheduler, placing pods on the simulated nodes;
- kwok, which plays the kubelet of every simulated Node: pods become Running and Ready, then end
  Succeeded (or Failed, or never) as described in kwok_stages.py.
Nodes are API objects created by the harness (`add_nodes`, default layout in nodes.py).

Every component gets its own identity from the control plane's CA (system:kube-controller-manager,
system:kube-scheduler; kwok runs as the admin), serves its health endpoints on a free loopback port
with a CA-issued certificate, and runs without leader election. `start()` returns once kcm and the
scheduler are healthy, every node is Ready and the `default` ServiceAccount exists (each wait
scaled by JOBSET_TEST_TIMEOUT_SCALE, as `ControlPlane._wait` does). Processes are
`ManagedProcess`es like etcd's and the apiserver's: start the cluster from the main thread.
"""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import yaml

from jobset_controller_dev.envtest import kwok_stages
from jobset_controller_dev.envtest.binaries import FULL_COMPONENTS, K8S_VERSION, KWOK_VERSION
from jobset_controller_dev.envtest.controlplane import ControlPlane, ControlPlaneError
from jobset_controller_dev.envtest.nodes import (
    KWOK_NODE_SELECTOR,
    NodeSpec,
    rack_topology,
)
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port

POD_GROUP_PROTECTION = "podgroup-protection-controller"
DEFAULT_CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "endpointslice-controller",
    "ttl-after-finished-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    # Removes the node.kubernetes.io/not-ready taint the apiserver puts on new Nodes once kwok
    # reports them Ready (and taints them again if kwok stops renewing their Leases).
    "node-lifecycle-controller",
    # Binds PersistentVolumeClaims (e.g. from volumeClaimPolicies) to PersistentVolumes that
    # tests or the dev loop create; there is no dynamic provisioner.
    "persistentvolume-binder-controller",
)
_NOT_READY_TAINT = "node.kubernetes.io/not-ready"

# InternalIPs 10.1.<n // 250>.<n % 250 + 1>: forty /24s of simulated nodes (the placement
# benchmark's 5000 nodes fit; kwok's own node IP, 10.1.255.254, stays clear of them).
_MAX_NODES = 10000


class FullCluster(ControlPlane):
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok and its nodes."""

    components: tuple[str, ...] = FULL_COMPONENTS

    def __init__(
        self,
        *,
        nodes: Sequence[NodeSpec] | None = None,
        pod_run_duration: float = kwok_stages.DEFAULT_RUN_DURATION,
        pod_start_delay: float = 0.0,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        node_lease_seconds: int = kwok_stages.NODE_LEASE_SECONDS,
        **control_plane_options: Any,
    ) -> None:
        """`nodes`: created at start (default: `rack_topology()`, 4 racks x 2 nodes).
        `pod_run_duration`: seconds a pod stays Ready before it ends (per pod: annotation
        kwok.jobset.test/run-duration). `pod_start_delay`: seconds from scheduled to Running.
        `node_lease_seconds`: the simulated nodes' Lease duration; kwok renews each Lease every
        quarter of it, so at thousands of nodes the default (40 s: 100 Lease writes a second
        at 1000 nodes) keeps the API server busy; a longer one also gets the node lifecycle
        controller a grace period of twice the duration, so that no node is marked NotReady
        between two renewals.
        Other options go to `ControlPlane` (bin_dir, crd_paths, workdir, keep_workdir, ...)."""
        super().__init__(**control_plane_options)
        self.node_lease_seconds = node_lease_seconds
        self._initial_nodes = list(rack_topology() if nodes is None else nodes)
        self.pod_run_duration = pod_run_duration
        self.pod_start_delay = pod_start_delay
        self.controllers = tuple(controllers)
        if self.workload_api and POD_GROUP_PROTECTION not in self.controllers:
            # The apiserver puts the scheduling.k8s.io/podgroup-protection finalizer on every
            # PodGroup and only this controller takes it off: without it no PodGroup is ever
            # deleted (suspend, JobSet deletion).
            self.controllers += (POD_GROUP_PROTECTION,)
        self.controller_manager: ManagedProcess | None = None
        self.scheduler: ManagedProcess | None = None
        self.kwok: ManagedProcess | None = None
        self.controller_manager_port = 0
        self.scheduler_port = 0
        self.kwok_config = self.workdir / "kwok.yaml"
        self.nodes: list[str] = []
        self._node_count = 0
        self.startup_seconds = 0.0

    # ----------------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        began = time.monotonic()
        try:
            super().start()
            self._start_components()
            self.add_nodes(self._initial_nodes)
            self.wait_for_service_account("default")
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        for proc in (self.kwok, self.scheduler, self.controller_manager):
            if proc is not None:
                proc.stop()
        super().stop()

    # ----------------------------------------------------------------------- components
    def _start_components(self) -> None:
        """Start kcm, the scheduler and kwok together, then wait for kcm's and the scheduler's
        health endpoints (kwok has none: its readiness shows as Ready nodes)."""
        self.controller_manager = self._controller_manager()
        self.scheduler = self._scheduler()
        self.kwok = self._kwok()
        for proc in (self.controller_manager, self.scheduler, self.kwok):
            proc.start()
        self._wait(
            self.controller_manager,
            lambda: self._probe(self.controller_manager_port, "/healthz") == 200,
            "kube-controller-manager /healthz",
            state=lambda: f"answers {self._probe(self.controller_manager_port, '/healthz')}",
        )
        self._wait(
            self.scheduler,
            lambda: self._probe(self.scheduler_port, "/readyz") == 200,
            "kube-scheduler /readyz",
            state=lambda: f"answers {self._probe(self.scheduler_port, '/readyz')}",
        )

    def _controller_manager(self) -> ManagedProcess:
        client = self.ca.issue(
            "kube-controller-manager-client", common_name="system:kube-controller-manager"
        )
        kubeconfig = self.write_kubeconfig(
            self.workdir / "kube-controller-manager.kubeconfig",
            client,
            user="system:kube-controller-manager",
        )
        self.controller_manager_port = free_port()
        return ManagedProcess(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                *self._secure_serving("kube-controller-manager", self.controller_manager_port),
                *self._delegated_auth(kubeconfig),
                "--leader-elect=false",
                f"--controllers={','.join(self.controllers)}",
                # Every controller acts as its own ServiceAccount (kube-system/job-controller,
                # ...), with the RBAC roles the apiserver bootstraps for it.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.service_account.key}",
                f"--root-ca-file={self.ca.pair.cert}",
                "--cluster-name=jobset-envtest",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--concurrent-job-syncs=10",
                "--concurrent-gc-syncs=20",
                "--concurrent-service-endpoint-syncs=10",
                "--endpointslice-updates-batch-period=0s",
                *self._node_monitor_args(),
                *self.feature_gate_args(),
                "--v=1",
            ],
            self.workdir / "kube-controller-manager.log",
        )

    def _node_monitor_args(self) -> list[str]:
        """The node lifecycle controller's grace period, for Leases longer than the default
        (`__init__`)."""
        if self.node_lease_seconds <= kwok_stages.NODE_LEASE_SECONDS:
            return []
        return [f"--node-monitor-grace-period={2 * self.node_lease_seconds}s"]

    def _scheduler(self) -> ManagedProcess:
        client = self.ca.issue("kube-scheduler-client", common_name="system:kube-scheduler")
        kubeconfig = self.write_kubeconfig(
            self.workdir / "kube-scheduler.kubeconfig", client, user="system:kube-scheduler"
        )
        config = self.workdir / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
                    "leaderElection": {"leaderElect": False},
                    # Retry unschedulable pods quickly: tests change nodes and expect reactions.
                    "podInitialBackoffSeconds": 1,
                    "podMaxBackoffSeconds": 2,
                },
                sort_keys=False,
            )
        )
        self.scheduler_port = free_port()
        return ManagedProcess(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--config={config}",
                *self._secure_serving("kube-scheduler", self.scheduler_port),
                *self._delegated_auth(kubeconfig),
                *self.feature_gate_args(),
                "--v=1",
            ],
            self.workdir / "kube-scheduler.log",
        )

    def _kwok(self) -> ManagedProcess:
        """kwok with the stages of kwok_stages.py (--config) acting for the admin. The flags
        repeat the KwokConfiguration's main options so that `ps` shows them."""
        kwok_stages.write_config(
            self.kwok_config,
            kubelet_version=K8S_VERSION,
            kwok_version=KWOK_VERSION,
            run_duration=self.pod_run_duration,
            start_delay=self.pod_start_delay,
            node_lease_seconds=self.node_lease_seconds,
        )
        return ManagedProcess(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--config={self.kwok_config}",
                f"--kubeconfig={self.kubeconfig}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                f"--cidr={kwok_stages.DEFAULT_POD_CIDR}",
                f"--node-ip={kwok_stages.DEFAULT_NODE_IP}",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
            ],
            self.workdir / "kwok.log",
        )

    def _secure_serving(self, name: str, port: int) -> list[str]:
        serving = self.ca.issue(
            f"{name}-serving",
            common_name=name,
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        return [
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={serving.cert}",
            f"--tls-private-key-file={serving.key}",
        ]

    def _delegated_auth(self, kubeconfig: Path) -> list[str]:
        return [
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--client-ca-file={self.ca.pair.cert}",
            # The client CA is given; the apiserver runs no front proxy, so there is nothing
            # more to look up in kube-system/extension-apiserver-authentication.
            "--authentication-skip-lookup=true",
        ]

    def _probe(self, port: int, path: str) -> int:
        """GET a component's endpoint over TLS with the admin certificate; 0 when unreachable
        (in 2 s, scaled)."""
        conn = http.client.HTTPSConnection(
            "127.0.0.1", port, context=self._ssl_context(), timeout=scaled(2)
        )
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        except (OSError, ssl.SSLError):
            return 0
        finally:
            conn.close()

    def component_processes(self) -> list[ManagedProcess]:
        """Every process this cluster runs (stopped ones included)."""
        return [
            p
            for p in (self.etcd, self.apiserver, self.controller_manager, self.scheduler, self.kwok)
            if p is not None
        ]

    # ----------------------------------------------------------------------- nodes
    def add_nodes(self, specs: Iterable[NodeSpec], *, wait: bool = True) -> list[str]:
        """Create simulated Nodes (kwok makes them Ready); returns their names.

        The n-th node gets InternalIP 10.1.<n // 250>.<n % 250 + 1> unless its spec sets one.
        With `wait`, returns once every one of them is Ready and schedulable.
        """
        names: list[str] = []
        for spec in specs:
            index = self._node_count
            if index >= _MAX_NODES:
                raise ControlPlaneError(f"at most {_MAX_NODES} simulated nodes are supported")
            internal_ip = spec.internal_ip or f"10.1.{index // 250}.{index % 250 + 1}"
            manifest = spec.manifest(internal_ip=internal_ip)
            status, body = self.request("POST", "/api/v1/nodes", manifest)
            if status != 201:
                raise ControlPlaneError(f"creating node {spec.name} failed ({status}): {body}")
            self._node_count += 1
            names.append(spec.name)
            self.nodes.append(spec.name)
        if wait and names:
            self.wait_nodes_ready(names)
        return names

    def wait_nodes_ready(self, names: Iterable[str], timeout: float | None = None) -> None:
        """Wait until the nodes are Ready (kwok) and schedulable: the not-ready taint the
        apiserver adds on create is gone (the node lifecycle controller removes it; without that
        controller the harness does). `timeout` (default: the ready timeout) is scaled once, by
        `_wait`; its error names the nodes still pending."""
        pending = set(names)
        assert self.kwok is not None
        untaint = "node-lifecycle-controller" not in self.controllers

        def ready() -> bool:
            for node in self.list_items("/api/v1/nodes"):
                name = node["metadata"]["name"]
                if name not in pending or not condition_true(node, "Ready"):
                    continue
                taints = node["spec"].get("taints") or []
                kept = [t for t in taints if t.get("key") != _NOT_READY_TAINT]
                if len(kept) == len(taints):
                    pending.discard(name)
                elif untaint:
                    self.patch_node(name, {"spec": {"taints": kept or None}})
            return not pending

        self._wait(
            self.kwok,
            ready,
            "simulated nodes Ready and untainted",
            timeout,
            state=lambda: f"{len(pending)} pending: {', '.join(sorted(pending)[:10])}",
        )

    def label_nodes(self, names: Iterable[str], labels: Mapping[str, str | None]) -> None:
        """Set (or, with None, remove) labels on nodes."""
        for name in names:
            self.patch_node(name, {"metadata": {"labels": dict(labels)}})

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch of a Node (e.g. {"spec": {"taints": [...]}})."""
        status, body = self.request(
            "PATCH", f"/api/v1/nodes/{name}", dict(patch), "application/merge-patch+json"
        )
        if status != 200:
            raise ControlPlaneError(f"patching node {name} failed ({status}): {body}")
        return body

    def freeze_node(self, name: str) -> list[str]:
        """Stop one node's kubelet, as far as the cluster can tell: kwok plays neither the node
        nor its pods any more (`kwok_stages.FROZEN_ANNOTATION` on both), and its Ready
        condition turns Unknown, which is what the node lifecycle controller writes once a
        kubelet's Lease has expired (at the bench's long Leases that would take 2 x the Lease;
        the taints that controller then adds follow the condition either way). Returns the
        `<namespace>/<name>` of the pods frozen with it: deleted, they stay Terminating.

        Pods scheduled to the node after this call are not frozen; freeze before the pods of
        interest can move."""
        frozen = {kwok_stages.FROZEN_ANNOTATION: "true"}
        self.patch_node(name, {"metadata": {"annotations": frozen}})
        pods = self.list_items(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}")
        names = []
        for pod in pods:
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            status, body = self.request(
                "PATCH", path, {"metadata": {"annotations": frozen}}, "application/merge-patch+json"
            )
            if status == 200:
                names.append(f"{meta['namespace']}/{meta['name']}")
            elif status != 404:
                raise ControlPlaneError(f"freezing pod {meta['name']} failed ({status}): {body}")
        status, body = self.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            ready_unknown_patch(),
            "application/strategic-merge-patch+json",
        )
        if status != 200:
            raise ControlPlaneError(f"marking node {name} Unknown failed ({status}): {body}")
        return names

    def add_volumes(self, count: int, *, size: str = "10Gi", prefix: str = "local-pv") -> list[str]:
        """Create `count` hostPath PersistentVolumes (no storage class) for claims to bind to.

        There is no dynamic provisioner; the persistentvolume-binder controller binds a claim
        without a storage class to any of these that is large enough.
        """
        names = []
        for index in range(count):
            name = f"{prefix}-{index}"
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "hostPath": {"path": f"/tmp/{name}"},
                },
            }
            status, reply = self.request("POST", "/api/v1/persistentvolumes", body)
            if status not in (201, 409):
                raise ControlPlaneError(f"creating PersistentVolume {name} failed: {reply}")
            names.append(name)
        return names

    def delete_nodes(self, names: Iterable[str]) -> None:
        for name in list(names):
            status, body = self.request("DELETE", f"/api/v1/nodes/{name}")
            if status not in (200, 202, 404):
                raise ControlPlaneError(f"deleting node {name} failed ({status}): {body}")
            if name in self.nodes:
                self.nodes.remove(name)

    # ----------------------------------------------------------------------- namespaces
    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """Create a namespace and wait until pods can be created in it (its `default`
        ServiceAccount exists; the ServiceAccount admission plugin rejects pods before that)."""
        metadata: dict[str, Any] = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        status, body = self.request("POST", "/api/v1/namespaces", {"metadata": metadata})
        if status != 201:
            raise ControlPlaneError(f"creating namespace {name} failed ({status}): {body}")
        self.wait_for_service_account(name)
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace; the namespace controller removes its content in the background."""
        self.request("DELETE", f"/api/v1/namespaces/{name}")

    def wait_for_service_account(self, namespace: str, name: str = "default") -> None:
        assert self.controller_manager is not None
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        self._wait(
            self.controller_manager,
            lambda: self._get_status(path) == 200,
            f"ServiceAccount {namespace}/{name}",
            state=lambda: f"GET answers {self._get_status(path)}",
        )

    # ----------------------------------------------------------------------- waiting
    def wait_for(
        self,
        path: str,
        predicate: Callable[[dict[str, Any]], object],
        *,
        timeout: float = 30.0,
        interval: float = 0.1,
        what: str = "",
    ) -> dict[str, Any]:
        """GET `path` until `predicate(body)` is truthy (404 gives an empty body); returns the
        body. Raises TimeoutError with the last body's summary once `timeout` s (scaled here:
        `polling.scaled`) have passed."""
        deadline = time.monotonic() + scaled(timeout)
        body: dict[str, Any] = {}
        while True:
            status, body = self.request("GET", path)
            if status == 404:
                body = {}
            elif status != 200:
                raise ControlPlaneError(f"GET {path} failed ({status}): {body}")
            if predicate(body):
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what or path}: condition not met within {scaled(timeout):g} s; last state: "
                    f"{summarize(body)}\n{self.log_tails()}"
                )
            time.sleep(interval)

    def list_items(self, path: str, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Items of a list path such as /api/v1/namespaces/<ns>/pods."""
        if label_selector:
            path += f"?labelSelector={quote(label_selector)}"
        status, body = self.request("GET", path)
        if status != 200:
            raise ControlPlaneError(f"GET {path} failed ({status}): {body}")
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def log_tails(self, lines: int = 8) -> str:
        """The last lines of every component's log (for failure messages)."""
        return "\n".join(
            f"--- {p.name} ({'running' if p.running() else 'stopped'}):\n{p.log_tail(lines)}"
            for p in self.component_processes()
        )


def ready_unknown_patch() -> dict[str, Any]:
    """The strategic-merge patch of a Node's status that the node lifecycle controller writes
    once the kubelet's Lease has expired: Ready Unknown, from now."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    unknown = {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {"status": {"conditions": [unknown]}}


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether obj.status.conditions has a condition of type `kind` with status True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def summarize(obj: Mapping[str, Any]) -> str:
    """A short description of an object or list for error messages."""
    if "items" in obj:
        return "; ".join(summarize(i) for i in obj["items"]) or "(no items)"
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    conditions = ",".join(
        f"{c.get('type')}={c.get('status')}" for c in status.get("conditions") or []
    )
    fields = {k: v for k, v in status.items() if k not in ("conditions", "containerStatuses")}
    return f"{meta.get('name', '?')}: {fields} [{conditions}]"
