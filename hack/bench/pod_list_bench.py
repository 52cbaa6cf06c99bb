"""Benchmark: what listing the JobSet pods costs the controller's memory, by page size and by
kind of relist (numbers, no pass/fail).

Why: the pod cache itself is small (compact, about 0.7 KB a trimmed pod), but a list answer is
parsed whole before it is trimmed, and glibc keeps much of a freed peak: the pod informer's first
list takes pages of `LARGE_OBJECT_PAGE` (controller/pods.py) and its relist after 410 Gone is a
streaming list (runtime/informer.py's docstring gives the figures this prints).

A bare control plane (etcd, kube-apiserver) holds `--pods` training pods as the pod caches see
them (hack/bench/pod_scale_bench.py's `training_pod`, bound to a node, with a JobSet's labels
and annotations; about 7 KB each as stored), created directly: no controller-manager, scheduler
or kwok is needed to list them. Then, for each page size and each relist kind, a fresh process
builds the controller's pod informer (PodPlacementController with the InPlaceRestart cache) and:

- first list: wall and CPU seconds to sync; RSS after it, over the process's own start, with
  garbage collected and free pages returned (malloc_trim: what stays for good); VmHWM over the
  start (the peak);
- relist (`--relists stream list`): after the first list in pages of 100 and a trim, the peak
  is reset (/proc/self/clear_refs) and the informer relists as after 410 Gone, as a streaming
  list or as one unpaged list; its peak over the RSS before it, and what stays after a trim.

Run: JOBSET_K8S_BIN=... .venv/bin/python hack/bench/pod_list_bench.py
     [--pods 10000] [--pages 500 250 100 50] [--relists stream list] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

from pod_scale_bench import training_pod

from jobset_controller.api.constants import (
    EXCLUSIVE_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
)
from jobset_controller.controller import pods as pod_controller
from jobset_controller.controller.resources import PODS
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.memtrim import malloc_trim
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.processes import process_peak_rss, process_rss

NAMESPACE = "pods"
PODS_PER_JOB = 100
MIB = 2**20


def placed_pod(job: int, index: int) -> dict[str, Any]:
    """Pod `index` of Job `job` (ten Jobs a JobSet), bound to a node of the Job's rack."""
    jobset = f"js-{job // 10:04d}"
    job_name = f"{jobset}-w-{job % 10}"
    uid = f"00000000-0000-0000-0000-{job:012d}"
    labels = {
        JOBSET_NAME_KEY: jobset,
        REPLICATED_JOB_NAME_KEY: "w",
        JOB_INDEX_KEY: str(job % 10),
        JOB_KEY: f"{job:040x}",
        "batch.kubernetes.io/job-completion-index": str(index),
        "job-name": job_name,
        "batch.kubernetes.io/controller-uid": uid,
    }
    annotations = {
        JOBSET_NAME_KEY: jobset,
        EXCLUSIVE_KEY: "rack",
        "batch.kubernetes.io/job-completion-index": str(index),
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
    }
    spec = training_pod()
    spec["nodeName"] = f"kwok-{job:04d}-{index % 4}"
    spec["nodeSelector"] = {"rack": f"rack-{job:04d}"}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": uid}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_name}-{index}",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": spec,
    }


async def seed(kubeconfig: str, count: int) -> float:
    client = await KubeClient.connect(kubeconfig=kubeconfig)
    try:
        await client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        # No controller-manager makes it here, and the ServiceAccount admission wants it.
        service_accounts = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
        await client.create(service_accounts, {"metadata": {"name": "default"}})
        limit = asyncio.Semaphore(32)

        async def create(k: int) -> None:
            async with limit:
                await client.create(PODS.path(NAMESPACE), placed_pod(*divmod(k, PODS_PER_JOB)))

        started = time.perf_counter()
        await asyncio.gather(*(create(k) for k in range(count)))
        return time.perf_counter() - started
    finally:
        await client.close()


# ------------------------------------------------------------------------------- the measured side
def rss_mib() -> float:
    return process_rss(os.getpid()) / MIB


def hwm_mib() -> float:
    return process_peak_rss(os.getpid()) / MIB


def reset_peak() -> None:
    """VmHWM := VmRSS (Linux's clear_refs)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def settled_mib() -> float:
    gc.collect()
    malloc_trim()
    return rss_mib()


async def measure(kubeconfig: str, page: int, relist: str) -> dict[str, Any]:
    client = await KubeClient.connect(kubeconfig=kubeconfig)
    start = settled_mib()
    reset_peak()  # the imports' peak is not the list's
    pod_controller.LARGE_OBJECT_PAGE = page  # read when the controller builds its informers
    controller = pod_controller.PodPlacementController(
        client,
        enqueue=lambda key: None,
        recorder=object(),  # type: ignore[arg-type]  # nothing is reconciled here
        in_place_restart=True,
    )
    informer = controller.pods
    cpu, wall = time.process_time(), time.perf_counter()
    task = asyncio.create_task(informer.run())
    await informer.wait_synced()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    figures: dict[str, Any] = {
        "page": page,
        "pods": len(informer.store),
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
        "hwm_mib": round(hwm_mib() - start, 1),
        "kept_mib": round(settled_mib() - start, 1),
    }
    if relist:
        reset_peak()
        before = rss_mib()
        informer._stream_relists = relist == "stream"  # a bench's reach into the informer
        cpu, wall = time.process_time(), time.perf_counter()
        await informer._list()  # the relist the run loop makes after 410 Gone
        figures |= {
            "relist": relist,
            "relist_wall_s": round(time.perf_counter() - wall, 2),
            "relist_cpu_s": round(time.process_time() - cpu, 2),
            "relist_peak_mib": round(hwm_mib() - before, 1),
            "relist_kept_mib": round(settled_mib() - before, 1),
            "streamed": informer.stats.streamed_relists,
        }
    await client.close()
    return figures


# ------------------------------------------------------------------------------------ the driver
def child(kubeconfig: str, page: int, relist: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", kubeconfig, str(page), relist]
    answer = subprocess.run(argv, capture_output=True, text=True)
    if answer.returncode != 0:
        raise SystemExit(f"the measured process failed ({answer.returncode}):\n{answer.stderr}")
    figures: dict[str, Any] = json.loads(answer.stdout.strip().splitlines()[-1])
    return figures


def print_table(title: str, header: list[str], keys: list[str], rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[key]) for key in keys) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--pages", type=int, nargs="+", default=[500, 250, 100, 50])
    parser.add_argument("--relists", nargs="*", default=["stream", "list"])
    parser.add_argument("--repeat", type=int, default=2, help="fresh processes per row")
    parser.add_argument("--child", nargs=3, metavar=("KUBECONFIG", "PAGE", "RELIST"))
    args = parser.parse_args()
    if args.child:
        kubeconfig, page, relist = args.child
        print(json.dumps(asyncio.run(measure(kubeconfig, int(page), relist))), flush=True)
        return

    with ControlPlane() as plane:
        kubeconfig = str(plane.kubeconfig)
        seconds = asyncio.run(seed(kubeconfig, args.pods))
        print(f"created {args.pods} pods in {seconds:.1f} s", flush=True)
        first = [child(kubeconfig, page, "") for page in args.pages for _ in range(args.repeat)]
        page = pod_controller.LARGE_OBJECT_PAGE
        relists = [
            child(kubeconfig, page, kind) for kind in args.relists for _ in range(args.repeat)
        ]
    print_table(
        f"First list of {args.pods} pods (MiB over the process's start)",
        ["page", "pods", "wall s", "CPU s", "peak MiB", "kept MiB"],
        ["page", "pods", "wall_s", "cpu_s", "hwm_mib", "kept_mib"],
        first,
    )
    if relists:
        print_table(
            f"Relist after 410 Gone, the first list in pages of {page} (MiB over the RSS before)",
            ["relist", "streamed", "wall s", "CPU s", "peak MiB", "kept MiB"],
            ["relist", "streamed", "relist_wall_s", "relist_cpu_s", "relist_peak_mib",
             "relist_kept_mib"],
            relists,
        )  # fmt: skip


if __name__ == "__main__":
    main()
