"""What the gang benches share (gang_bench.py and gang_contention.py): the bench's namespace and
paths, the JobSet each mode posts, kube-scheduler read from outside, the clean-up between runs.

Why a module of its own: both benches build on these pieces, and gang_bench runs the contention
measurement of gang_contention; with the pieces in gang_bench the two imported each other (one
inside a function, to dodge the cycle), and `gang_bench.py --contention` loaded gang_bench twice,
with two `Scheduler` classes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchlib import RawClient, control_plane_cpu, parse_metrics, schedule_attempts

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.api.features import gate_name
from jobset_controller.api.gang import SCHEDULING_API_VERSION
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import RUN_FOREVER_ANNOTATION
from jobset_controller_dev.envtest.manifests import container, jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import GPU_RESOURCE
from jobset_controller_dev.envtest.processes import process_cpu

NAMESPACE = "gang-bench"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"
SCHEDULING = f"/apis/{SCHEDULING_API_VERSION}/namespaces/{NAMESPACE}"
JOBSET_NAME_LABEL = JOBSET_NAME_KEY
GATE = gate_name("workload_aware_scheduling")
# What "quiet" means between runs: the API server and etcd together under this many CPU seconds
# per second (kwok renewing 256 node Leases keeps them from ever being idle).
QUIET_CPU = 0.25


def scheduling_spec(mode: str, rjobs: list[str]) -> dict[str, Any] | None:
    """The JobSet's `spec.scheduling` for `mode` (None: the field is left out)."""
    if mode == "none":
        return None
    if mode == "gang":
        return {}  # defaults: one JobSet-wide Gang, minCount = every pod
    if mode == "basic":
        return {"schedulingPolicy": {"basic": {}}}
    if mode == "rjob-gangs":
        return {
            "replicatedJobs": [
                {"targetReplicatedJobs": [name], "schedulingPolicy": {"gang": {}}} for name in rjobs
            ]
        }
    raise ValueError(f"unknown mode {mode}")


def manifest(name: str, mode: str, rjobs: int, jobs: int, pods: int, gpus: int) -> dict[str, Any]:
    """The JobSet: `rjobs` ReplicatedJobs sharing `jobs` Jobs of `pods` pods that run forever."""
    resources = {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else {}
    names = [f"w{index}" for index in range(rjobs)]
    replicated = [
        replicated_job(
            rjob,
            jobs // rjobs,
            pods=pods,
            containers=[container(resources=resources)],
            annotations={RUN_FOREVER_ANNOTATION: "true"},
        )
        for rjob in names
    ]
    scheduling = scheduling_spec(mode, names)
    extra = {} if scheduling is None else {"scheduling": scheduling}
    return jobset_manifest(name, replicated_jobs=replicated, **extra)


class Scheduler:
    """kube-scheduler read from outside: its CPU (/proc) and its /metrics (the admin client
    certificate is authorised through the API server's SubjectAccessReview)."""

    def __init__(self, cluster: FullCluster, client: RawClient) -> None:
        assert cluster.scheduler is not None
        assert cluster.scheduler.pid is not None
        self.pid = cluster.scheduler.pid
        self.url = f"https://127.0.0.1:{cluster.scheduler_port}/metrics"
        self.client = client

    def cpu(self) -> float:
        return process_cpu(self.pid)

    async def counters(self) -> dict[str, float]:
        """Attempts per result ("pod:<result>", "group:<result>"), the pods' algorithm seconds
        ("algorithm") and the pod-group cycles' ("group cycles"), summed over every profile."""
        async with self.client.session.get(self.url) as response:
            assert response.status == 200, f"scheduler /metrics: {response.status}"
            text = await response.text()
        samples = parse_metrics(text)
        out = {"pod:" + result: n for result, n in schedule_attempts(samples).items()}
        for (name, labels), value in samples.items():
            key = ""
            if name == "scheduler_podgroup_schedule_attempts_total":
                key = "group:" + dict(labels)["result"]
            elif name == "scheduler_scheduling_algorithm_duration_seconds_sum":
                # Per pod, in both paths: a pod-group cycle runs the pod's algorithm inside it
                # (the group's own histogram includes these, so adding it would count twice).
                key = "algorithm"
            elif name == "scheduler_podgroup_scheduling_attempt_duration_seconds_sum":
                key = "group cycles"
            if key:
                out[key] = out.get(key, 0.0) + value
        return out


async def delete_and_wait(cluster: FullCluster, client: RawClient, name: str) -> None:
    """Delete the JobSet (background propagation: the garbage collector removes Jobs, pods,
    Workload and PodGroups) and wait until none is left and the API server is quiet, so one
    run's clean-up never falls in the next run's measurement."""
    status, reply = await client.request(
        "DELETE",
        f"{JOBSETS}/{name}",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )
    assert status in (200, 202), reply
    paths = [
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
        f"{SCHEDULING}/workloads",
        f"{SCHEDULING}/podgroups",
    ]
    deadline = time.monotonic() + 300
    while True:
        left = 0
        for path in paths:
            _, listing = await client.request("GET", path)
            left += len(listing.get("items") or ())
        if not left:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: {left} objects left after 300 s")
        await asyncio.sleep(0.5)
    await quiet(cluster)


async def quiet(cluster: FullCluster, limit: float = 60.0) -> None:
    """Until the API server and etcd used under QUIET_CPU CPU-seconds per second twice in a row
    (or `limit` seconds passed: the run goes on, the next figures may carry some clean-up)."""
    deadline = time.monotonic() + limit
    calm = 0
    last = control_plane_cpu(cluster)
    while calm < 2 and time.monotonic() < deadline:
        await asyncio.sleep(1)
        now = control_plane_cpu(cluster)
        calm = calm + 1 if now - last < QUIET_CPU else 0
        last = now


def counts(values: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(values.items())) or "-"
