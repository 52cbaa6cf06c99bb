"""The two sides of a differential run: a fresh full local cluster each, one running upstream's
controller v0.12.0 (with upstream's CRD), the other ours (with our CRD), the same webhooks
registered on both.

Each side is a `FullCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)
with the same simulated nodes, the controller as a host process on loopback with its webhook
server on 127.0.0.1 and a serving certificate the test issues from the cluster's CA (the way the
e2e tests run ours: `internalCertManagement.enable: false`, a `webhook.certDir`), and the same
four webhooks upstream ships (`mjobset.kb.io`, `vjobset.kb.io`, `mpod.kb.io`, `vpod.kb.io`, the
pod ones with the chart's objectSelector) pointing by URL at that server. Both controllers run
with their default feature gates and leader election off.

Nodes: the e2e layout (4 racks x 2 nodes, zones a/b, one pool per rack) for every scenario, plus
racks kept for exclusive placement, tainted so that no other scenario's pod lands there (an
exclusive Job's leader repels every JobSet pod of another Job from its domain, and is repelled by
them, so it would wait for the other scenarios' pods to end):
- racks 4-7 (one node each): taint and label `differential.jobset.test/reserved=exclusive`; the
  affinity-strategy scenarios select and tolerate them;
- racks 8-9 (one node each): tainted `alpha.jobset.sigs.k8s.io/no-schedule`, the taint the
  node-selector strategy tolerates by itself; the test labels them with the namespaced Job names.

Clusters and controllers are started from the main thread (their processes die with the thread
that started them); the two clusters then run every scenario at the same time.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from tests.differential.cache import Cache

from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.nodes import (
    NODE_POOL_LABEL,
    RACK_LABEL,
    REGION,
    REGION_LABEL,
    ZONE_LABEL,
    NodeSpec,
    rack_topology,
)
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.upstream import UpstreamController, upstream_crds
from jobset_controller_dev.envtest.webhooks import upstream_webhook_configurations

UPSTREAM = "upstream"
OURS = "ours"
CONTROLLER_NAMESPACE = "jobset-system"

RESERVED_LABEL = "differential.jobset.test/reserved"
RESERVED_EXCLUSIVE = "exclusive"
NO_SCHEDULE_TAINT = "alpha.jobset.sigs.k8s.io/no-schedule"
AFFINITY_RACKS = (4, 5, 6, 7)
NODE_SELECTOR_RACKS = (8, 9)


def node_layout() -> list[NodeSpec]:
    """The e2e racks plus the reserved ones (see the module docstring)."""
    nodes = list(rack_topology())

    def reserved(rack: int, labels: Mapping[str, str], taint: Mapping[str, str]) -> NodeSpec:
        return NodeSpec(
            name=f"kwok-r{rack}-n0",
            labels={
                REGION_LABEL: REGION, ZONE_LABEL: "zone-c", RACK_LABEL: f"rack-{rack}",
                NODE_POOL_LABEL: f"pool-{rack}", **labels,
            },
            taints=[dict(taint)],
        )  # fmt: skip

    for rack in AFFINITY_RACKS:
        nodes.append(
            reserved(
                rack,
                {RESERVED_LABEL: RESERVED_EXCLUSIVE},
                {"key": RESERVED_LABEL, "value": RESERVED_EXCLUSIVE, "effect": "NoSchedule"},
            )
        )
    for rack in NODE_SELECTOR_RACKS:
        nodes.append(reserved(rack, {}, {"key": NO_SCHEDULE_TAINT, "effect": "NoSchedule"}))
    return nodes


_SAMPLE = re.compile(
    r"^(workqueue_depth|workqueue_unfinished_work_seconds)\{([^}]*)\}\s+(\S+)", re.M
)


class Idleness:
    """When the controller's JobSet work queue was last seen idle: nothing queued, nothing in
    flight (`workqueue_depth` and `workqueue_unfinished_work_seconds` of the queue named
    `jobset`, the names both controllers publish), scraped from its /metrics every 0.3 s with a
    ServiceAccount token. `last` is the time the scrape that saw it idle started (monotonic s).
    The scrape thread wakes `condition` (the cache's) after each scrape."""

    def __init__(self, port: int, token: str, condition: threading.Condition) -> None:
        self.url = f"https://127.0.0.1:{port}/metrics"
        self.token = token
        self.condition = condition
        self.last = 0.0
        self.error = ""
        self.stopping = threading.Event()
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # the controllers' self-signed metrics certs
        self.thread = threading.Thread(target=self._run, daemon=True, name="idleness")
        self.thread.start()

    def _scrape(self) -> bool:
        headers = {"Authorization": f"Bearer {self.token}"}
        request = urllib.request.Request(self.url, headers=headers)
        with urllib.request.urlopen(request, timeout=scaled(5), context=self.context) as reply:
            text = reply.read().decode()
        total = 0.0
        seen = 0
        for _name, labels, value in _SAMPLE.findall(text):
            if 'name="jobset"' in labels.split(","):
                total += float(value)
                seen += 1
        return seen == 2 and total == 0

    def _run(self) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            try:
                idle = self._scrape()
            except OSError as error:
                self.error = repr(error)
                idle = False
            with self.condition:
                if idle:
                    self.last = began
                self.condition.notify_all()
            self.stopping.wait(0.3)  # the scrape period

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=scaled(10))


class Side:
    """One cluster and the controller under test on it (started by `start_side`)."""

    def __init__(self, name: str, cluster: FullCluster, workdir: Path) -> None:
        self.name = name
        self.cluster = cluster
        self.workdir = workdir
        self.upstream: UpstreamController | None = None
        self.ours: ControllerProcess | None = None
        self.log = workdir / f"{name}-controller.log"
        self.cache: Cache | None = None
        self.metrics_port = free_port()
        self.idleness: Idleness | None = None

    # ------------------------------------------------------------------------ the controller
    def start_controller(self, upstream_bin: Path | None) -> None:
        """Certificates, Configuration and webhooks; then the controller process (not waited)."""
        cluster = self.cluster
        cluster.create_namespace(CONTROLLER_NAMESPACE)
        certs = self.workdir / f"{self.name}-webhook-certs"
        cluster.ca.write_pair(
            certs, f"{self.name}-webhook", common_name="webhook", dns_names=("localhost",),
            ip_addresses=("127.0.0.1",), server=True,
        )  # fmt: skip
        port = free_port()
        base = f"https://127.0.0.1:{port}"
        for path, body in upstream_webhook_configurations(base, cluster.ca.cert_pem):
            status, reply = cluster.request("POST", path, body)
            assert status == 201, reply
        sections: dict[str, Any] = {
            "leaderElection": {"leaderElect": False, "resourceNamespace": CONTROLLER_NAMESPACE},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
        }
        config = write_configuration(self.workdir / f"{self.name}-config.yaml", sections)
        if upstream_bin is not None:
            self.upstream = UpstreamController(
                upstream_bin, kubeconfig=cluster.kubeconfig, config=config, log=self.log,
                metrics_port=self.metrics_port, args=["--leader-elect=false"],
            )  # fmt: skip
        else:
            self.ours = ControllerProcess(
                kubeconfig=cluster.kubeconfig, config=config, log=self.log,
                metrics=f"127.0.0.1:{self.metrics_port}",
                args=["--leader-elect=false", "--log-format=json"],
            )  # fmt: skip

    def watch_idleness(self, condition: threading.Condition) -> None:
        """A ServiceAccount allowed to read /metrics, and the scraper (see `Idleness`)."""
        cluster = self.cluster
        account = "differential-scraper"
        status, body = cluster.request(
            "POST", f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}/serviceaccounts",
            {"metadata": {"name": account}},
        )  # fmt: skip
        assert status == 201, body
        status, body = cluster.request(
            "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {"metadata": {"name": account},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "cluster-admin"},
             "subjects": [{"kind": "ServiceAccount", "name": account,
                           "namespace": CONTROLLER_NAMESPACE}]},
        )  # fmt: skip
        assert status == 201, body
        status, body = cluster.request(
            "POST",
            f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert status == 201, body
        self.idleness = Idleness(self.metrics_port, body["status"]["token"], condition)

    def wait_ready(self, within: float = 120) -> None:
        """Until the controller is ready, ours has found its pod webhooks (leader-follower mode,
        as upstream always is), and the API server admits a JobSet through the webhooks; each
        within `within` s, scaled (by the controllers' `wait_ready` and here)."""
        if self.upstream is not None:
            self.upstream.wait_ready(within)
        else:
            assert self.ours is not None
            self.ours.wait_ready(within, interval=0.2)
        deadline = time.monotonic() + scaled(within)
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "admission-probe"},
            "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox"}]}}}}}]},
        }  # fmt: skip
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{CONTROLLER_NAMESPACE}/jobsets"
        while True:
            status, body = self.cluster.request("POST", f"{path}?dryRun=All", probe)
            defaulted = status == 201 and "startupPolicy" in body.get("spec", {})
            if defaulted and (self.ours is None or self.our_mode() == "leader-follower"):
                return
            assert time.monotonic() < deadline, (
                f"{self.name} not admitting within {scaled(within):g} s (mode "
                f"{self.our_mode() if self.ours is not None else 'upstream'}): {status} {body}"
            )
            time.sleep(0.2)  # poll interval of this readiness wait

    def our_mode(self) -> str | None:
        """The last exclusive placement mode our controller logged."""
        found = None
        for line in self.log.read_text().splitlines():
            if '"exclusive placement mode"' in line:
                found = json.loads(line).get("mode")
        return found

    def stop_controller(self) -> int:
        if self.idleness is not None:
            self.idleness.stop()
        if self.upstream is not None:
            self.upstream.stop()
            return 0
        assert self.ours is not None
        return self.ours.stop(60)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def start_cluster(name: str, workdir: Path, upstream_bin: Path, keep: bool) -> FullCluster:
    crds = upstream_crds(upstream_bin) if name == UPSTREAM else None
    options: dict[str, Any] = {"nodes": node_layout(), "keep_workdir": keep}
    if crds is not None:
        options["crd_paths"] = crds
    return FullCluster(**options).start()


def dump_yaml(path: Path, data: Any) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=True))
