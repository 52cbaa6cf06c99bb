"""Kueue's API objects as a test (or a person at a prompt) creates them, and JobSets queued on them.

`KueueNamespace` is one namespace on one cluster with its own ClusterQueue, LocalQueue, flavors,
priority classes and topologies: cluster-scoped objects carry the namespace's suffix in their
names, so tests sharing a cluster and a Kueue never share quota. It also finds the Workload Kueue
made for a JobSet (the object that says whether, where and why a JobSet was admitted or evicted).
The manifest builders make small JobSets whose pods request only cpu, the one resource the
ClusterQueues here cover (a request Kueue's queue does not cover makes a Workload inadmissible).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller_dev.envtest.fullcluster import FullCluster, condition_true
from jobset_controller_dev.envtest.kueue import KUEUE_API, KUEUE_API_VERSION, QUEUE_NAME_LABEL
from jobset_controller_dev.envtest.kwok_stages import RUN_DURATION_ANNOTATION
from jobset_controller_dev.envtest.nodes import RACK_LABEL
from jobset_controller_dev.envtest.polling import scaled

JOBSET_NAME = JOBSET_NAME_KEY


class KueueNamespace:
    """One test's namespace on one cluster, with helpers for Kueue's objects and JobSets.

    Cluster-scoped objects (flavors, ClusterQueues, priority classes, topologies) get the
    namespace as a suffix so tests never share quota; they are deleted when the test ends.
    """

    def __init__(self, cluster: FullCluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace
        self.suffix = namespace.rsplit("-", 1)[-1]
        self._cluster_scoped: list[str] = []

    # ----------------------------------------------------------------------- objects
    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        status, reply = self.cluster.request("POST", path, body)
        assert status == 201, f"POST {path}: {status} {reply}"
        return reply

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    def cluster_object(self, plural: str, body: dict[str, Any]) -> str:
        """Create a cluster-scoped Kueue object (deleted on cleanup); returns its name."""
        path = f"{KUEUE_API}/{plural}"
        self.create(path, {"apiVersion": KUEUE_API_VERSION, **body})
        self._cluster_scoped.append(f"{path}/{body['metadata']['name']}")
        return str(body["metadata"]["name"])

    def flavor(self, base: str, node_labels: Mapping[str, str], topology: str | None = None) -> str:
        spec: dict[str, Any] = {"nodeLabels": dict(node_labels)} if node_labels else {}
        if topology:
            spec["topologyName"] = topology
        return self.cluster_object(
            "resourceflavors",
            {"kind": "ResourceFlavor", "metadata": {"name": self.name(base)}, "spec": spec},
        )

    def topology(self, base: str, levels: Sequence[str]) -> str:
        return self.cluster_object(
            "topologies",
            {
                "kind": "Topology",
                "metadata": {"name": self.name(base)},
                "spec": {"levels": [{"nodeLabel": level} for level in levels]},
            },
        )

    def priority_class(self, base: str, value: int) -> str:
        return self.cluster_object(
            "workloadpriorityclasses",
            {
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": self.name(base)},
                "value": value,
            },
        )

    def cluster_queue(
        self,
        base: str,
        flavors: Sequence[tuple[str, str]],
        *,
        preemption: Mapping[str, str] | None = None,
        admission_checks: Sequence[str] = (),
    ) -> str:
        """A ClusterQueue for this namespace only, with a cpu quota per flavor (in order)."""
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": f, "resources": [{"name": "cpu", "nominalQuota": cpu}]}
                        for f, cpu in flavors
                    ],
                }
            ],
        }
        if preemption:
            spec["preemption"] = dict(preemption)
        if admission_checks:
            spec["admissionChecksStrategy"] = {
                "admissionChecks": [{"name": check} for check in admission_checks]
            }
        return self.cluster_object(
            "clusterqueues",
            {"kind": "ClusterQueue", "metadata": {"name": self.name(base)}, "spec": spec},
        )

    def local_queue(self, name: str, cluster_queue: str) -> str:
        self.create(
            f"{KUEUE_API}/namespaces/{self.ns}/localqueues",
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "LocalQueue",
                "metadata": {"name": name},
                "spec": {"clusterQueue": cluster_queue},
            },
        )
        return name

    def cleanup(self) -> None:
        self.cluster.delete_namespace(self.ns)
        for path in reversed(self._cluster_scoped):
            self.cluster.request("DELETE", path)

    # ----------------------------------------------------------------------- JobSets
    def jobsets(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.ns}/jobsets"
        return f"{base}/{name}" if name else base

    def create_jobset(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.create(self.jobsets(), body)

    def get_jobset(self, name: str) -> dict[str, Any]:
        status, body = self.cluster.request("GET", self.jobsets(name))
        assert status == 200, body
        return body

    def wait_jobset(
        self,
        name: str,
        predicate: Callable[[dict[str, Any]], object],
        what: str,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """`FullCluster.wait_for` on the JobSet (which scales `timeout`)."""
        return self.cluster.wait_for(
            self.jobsets(name), predicate, timeout=timeout, what=f"JobSet {name}: {what}"
        )

    def pods(self, jobset_name: str) -> list[dict[str, Any]]:
        return self.cluster.list_items(
            f"/api/v1/namespaces/{self.ns}/pods", label_selector=f"{JOBSET_NAME}={jobset_name}"
        )

    def jobs(self, jobset_name: str) -> list[dict[str, Any]]:
        return self.cluster.list_items(
            f"/apis/batch/v1/namespaces/{self.ns}/jobs",
            label_selector=f"{JOBSET_NAME}={jobset_name}",
        )

    def wait_pods(
        self,
        jobset_name: str,
        predicate: Callable[[list[dict[str, Any]]], object],
        what: str,
        timeout: float = 60,
    ) -> list[dict[str, Any]]:
        """`FullCluster.wait_for` on the JobSet's pods (which scales `timeout`)."""
        body = self.cluster.wait_for(
            f"/api/v1/namespaces/{self.ns}/pods?labelSelector={JOBSET_NAME}%3D{jobset_name}",
            lambda b: predicate(b.get("items") or []),
            timeout=timeout,
            what=f"pods of {jobset_name}: {what}",
        )
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def node_racks(self) -> dict[str, str]:
        return {
            n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL]
            for n in self.cluster.list_items("/api/v1/nodes")
            if RACK_LABEL in n["metadata"]["labels"]
        }

    # ----------------------------------------------------------------------- Workloads
    def workload_of(self, jobset_name: str) -> dict[str, Any] | None:
        """The Workload Kueue created for a JobSet (owned by it), if any."""
        for wl in self.cluster.list_items(f"{KUEUE_API}/namespaces/{self.ns}/workloads"):
            owners = wl["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "JobSet" and o.get("name") == jobset_name for o in owners):
                return wl
        return None

    def wait_workload(
        self,
        jobset_name: str,
        predicate: Callable[[dict[str, Any]], object],
        what: str,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """The JobSet's Workload once `predicate` holds for it, within `timeout` s (scaled here:
        `polling.scaled`); the error gives the last Workload's conditions."""
        deadline = time.monotonic() + scaled(timeout)
        wl: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            wl = self.workload_of(jobset_name)
            if wl is not None and predicate(wl):
                return wl
            time.sleep(0.2)
        conditions = [
            (c["type"], c["status"], c.get("reason"))
            for c in ((wl or {}).get("status") or {}).get("conditions") or []
        ]
        raise TimeoutError(
            f"Workload of {jobset_name}: {what} not met within {scaled(timeout):g} s; "
            + (f"conditions {conditions}" if wl is not None else "no Workload")
        )


# --------------------------------------------------------------------------- manifests
def rjob(
    name: str,
    *,
    replicas: int = 1,
    pods: int = 1,
    cpu: str = "1",
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A replicated Job whose pods request `cpu` (the only resource the ClusterQueues cover)."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "backoffLimit": 0,
                "template": {
                    "metadata": {
                        "annotations": {RUN_DURATION_ANNOTATION: "2s", **(annotations or {})}
                    },
                    "spec": pod_spec,
                },
            }
        },
    }


def jobset(
    name: str,
    *rjobs: dict[str, Any],
    queue: str | None = "lq",
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta_labels = dict(labels or {})
    if queue:
        meta_labels[QUEUE_NAME_LABEL] = queue
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": meta_labels},
        "spec": {"replicatedJobs": list(rjobs), **spec},
    }


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def is_true(obj: Mapping[str, Any], kind: str) -> bool:
    return condition_true(obj, kind)


def pod_count(js: Mapping[str, Any]) -> int:
    """How many pods a JobSet runs at once (replicas x parallelism over its replicated Jobs)."""
    return sum(
        rj["replicas"] * rj["template"]["spec"].get("parallelism", 1)
        for rj in js["spec"]["replicatedJobs"]
    )
