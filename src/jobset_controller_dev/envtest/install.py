"""Installing the controller on a real node the way users do, and waiting for it by condition.

- `install_manifests`: `kubectl apply --server-side -f` of the release's `manifests.yaml` (the
  default install with the image pinned: hack/release.sh), what the README tells users to do;
- `install_chart`: `helm install` of the release's packaged chart, with no value set;
- `wait_rollout`: the Deployment's pods Ready through the kubelet's probes, and its old pods gone;
- `wait_service_served`: the Service has a ready endpoint AND a connection to its ClusterIP gets
  through from the node's network, so the first request through it (the API server calling a
  webhook after a rollout) cannot race kube-proxy: waited for, never retried blindly.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from jobset_controller_dev.envtest.binaries import repo_root
from jobset_controller_dev.envtest.controlplane import ControlPlaneError
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.realnode import RealNode


@dataclass(frozen=True)
class Install:
    """Where an install put the controller."""

    namespace: str
    deployment: str
    webhook_service: str
    metrics_service: str
    metrics_reader_role: str
    secret: str
    pod_selector: str
    container: str = "manager"  # the controller's container in its pods


def _root() -> Path:
    root = repo_root()
    if root is None:
        raise ControlPlaneError("installing needs the repository (manifests/, charts/)")
    return root


def install_manifests(node: RealNode, manifests: Path) -> Install:
    """The release's `manifests.yaml`, applied as its first line says (server-side)."""
    node.cluster.kubectl("apply", "--server-side", "-f", str(manifests))
    return Install(
        namespace="jobset-system",
        deployment="jobset-controller-manager",
        webhook_service="jobset-webhook-service",
        metrics_service="jobset-controller-manager-metrics-service",
        metrics_reader_role="jobset-metrics-reader",
        secret="jobset-webhook-server-cert",
        pod_selector="control-plane=controller-manager",
    )


def install_chart(node: RealNode, chart: Path, *, release: str, namespace: str) -> Install:
    """`helm install` of the release's packaged chart into `namespace` (created here, enforcing
    the restricted Pod Security profile), nothing set: its default image is the release's."""
    node.cluster.create_namespace(
        namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"}
    )
    run(
        [
            str(node.cluster.bin_dir / "helm"),
            f"--kubeconfig={node.cluster.kubeconfig}",
            "install",
            release,
            str(chart),
            "--namespace",
            namespace,
            "--wait",
            f"--timeout={scaled(300):.0f}s",
        ]
    )
    full = chart_fullname(release)
    return Install(
        namespace=namespace,
        deployment=f"{full}-controller",
        webhook_service=f"{full}-webhook-service",
        metrics_service=f"{full}-metrics-service",
        metrics_reader_role=f"{full}-metrics-reader",
        secret=f"{full}-webhook-server-cert",
        pod_selector=f"app.kubernetes.io/instance={release}",
        container="controller",
    )


def chart_fullname(release: str, name: str = "jobset") -> str:
    """The chart's `<fullname>` for a release (upstream's chart's rule, which ours follows): the
    release name when it contains the base name, else `<release>-<name>` (63 characters at most)."""
    full = release if name in release else f"{release}-{name}"
    return full[:63].rstrip("-")


def uninstall_chart(node: RealNode, *, release: str, namespace: str) -> None:
    """`helm uninstall`, then what helm leaves by design: the CRD (chart `crds/`) and the
    namespace."""
    run(
        [
            str(node.cluster.bin_dir / "helm"),
            f"--kubeconfig={node.cluster.kubeconfig}",
            "uninstall",
            release,
            "--namespace",
            namespace,
            "--wait",
        ]
    )
    node.cluster.kubectl("delete", "crd", "jobsets.jobset.x-k8s.io", "--ignore-not-found")
    node.cluster.delete_namespace(namespace)


def uninstall_manifests(node: RealNode, manifests: Path) -> None:
    node.cluster.kubectl("delete", "-f", str(manifests), "--wait=true", "--ignore-not-found")


def wait_rollout(node: RealNode, install: Install, timeout: float = 180) -> None:
    """`kubectl rollout status` of the controller's Deployment, then its old pods gone, within
    `timeout` s each (scaled here: `polling.scaled`); kubectl's error says which replicas it
    last saw.

    Why the second wait: rollout status is done once the new pods are available, while the old
    ones may still be terminating, and a terminating controller still runs (it drains, and its
    certificate rotator still writes the Secret under the old flags: a test that deleted the
    Secret right after a rollout got it back from the old pod, with the old lifetimes)."""
    node.cluster.kubectl(
        "rollout",
        "status",
        f"deployment/{install.deployment}",
        "-n",
        install.namespace,
        f"--timeout={scaled(timeout):.0f}s",
    )
    _, deployment = node.cluster.request(
        "GET", f"/apis/apps/v1/namespaces/{install.namespace}/deployments/{install.deployment}"
    )
    want = deployment["spec"].get("replicas", 1)
    deadline = time.monotonic() + scaled(timeout)
    while True:
        _, found = node.cluster.request(
            "GET",
            f"/api/v1/namespaces/{install.namespace}/pods?labelSelector={quote(install.pod_selector)}",
        )
        terminating = [
            p["metadata"]["name"] for p in found["items"] if p["metadata"].get("deletionTimestamp")
        ]
        if not terminating and len(found["items"]) == want:
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"deployment {install.namespace}/{install.deployment}: old pods not gone within "
                f"{scaled(timeout):g} s ({len(found['items'])} pods for {want} replicas, "
                f"terminating: {terminating})"
            )
        time.sleep(0.2)  # poll interval of the wait for the condition above


def wait_service_served(node: RealNode, namespace: str, service: str, timeout: float = 60) -> None:
    """Ready endpoints behind the Service, kube-proxy sending its traffic to exactly those (not
    to a pod a rollout just replaced), and a connection to its ClusterIP that gets through from
    the node's network (as the API server's calls to a webhook do). Within `timeout` s (scaled
    here: `polling.scaled`); the error says which of the three it last saw."""
    _, spec = node.cluster.request("GET", f"/api/v1/namespaces/{namespace}/services/{service}")
    address, port = spec["spec"]["clusterIP"], spec["spec"]["ports"][0]["port"]
    deadline = time.monotonic() + scaled(timeout)
    while True:
        ready = set(_ready_addresses(node, namespace, service))
        programmed = _programmed(node, namespace, service)
        connects = _connects(address, port)
        if ready and programmed == ready and connects:
            return
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"service {namespace}/{service} not served within {scaled(timeout):g} s "
                f"(ready endpoints {sorted(ready)}, kube-proxy's {sorted(programmed)}, "
                f"{address}:{port} {'connects' if connects else 'refuses or times out'})"
            )
        time.sleep(0.2)


def _programmed(node: RealNode, namespace: str, service: str) -> set[str]:
    """The endpoints kube-proxy sends the Service's traffic to now (its DNAT targets)."""
    rules = node.netns.run("iptables-save", "-t", "nat", check=False)
    targets = set()
    for line in rules.splitlines():
        if f'"{namespace}/{service}' in line and "--to-destination" in line:
            targets.add(line.rsplit("--to-destination ", 1)[1].split()[0].rsplit(":", 1)[0])
    return targets


def _connects(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=scaled(2)):
            return True
    except OSError:
        return False


def _ready_addresses(node: RealNode, namespace: str, service: str) -> list[str]:
    _, body = node.cluster.request(
        "GET",
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        f"?labelSelector=kubernetes.io/service-name={service}",
    )
    return [
        address
        for item in body.get("items", [])
        for endpoint in item.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint.get("addresses") or []
    ]


def run(argv: list[str], *, timeout: float = 300) -> str:
    """`argv`'s stdout; fails on a non-zero exit or after `timeout` s (scaled here)."""
    result = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=scaled(timeout)
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout
