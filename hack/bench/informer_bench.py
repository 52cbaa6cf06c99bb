"""Benchmark: the informer cache on a real apiserver (numbers and ratios, no pass/fail).

Creates N labelled Jobs (as the controller's children look), then measures for our informer:
- time to list and sync N Jobs, and to see a burst of N updates over the watch;
- memory retained per cached Job (tracemalloc): untrimmed, trimmed, and trimmed and compact (the
  compressed JSON the controller keeps);
- the worst event-loop lag while syncing (a stall here delays lease renewal);
and, for comparison, the official client's typed deserialisation of the same list.

Run: .venv/bin/python hack/bench/informer_bench.py [--jobs 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from typing import Any

from jobset_controller.api.constants import (
    JOB_INDEX_KEY,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
)
from jobset_controller.controller.informers import trim_job
from jobset_controller.controller.resources import JOBS
from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.informer import Informer, strip_managed_fields
from jobset_controller.runtime.looplag import LoopLagMonitor
from jobset_controller_dev.envtest import ControlPlane


def job(i: int) -> dict[str, Any]:
    labels = {
        JOBSET_NAME_KEY: "bench",
        REPLICATED_JOB_NAME_KEY: "workers",
        JOB_INDEX_KEY: str(i),
        RESTARTS_KEY: "0",
    }
    container = {
        "name": "trainer",
        "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "command": ["torchrun", "--nnodes=4", "/workspace/train.py"],
        "env": [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(10)],
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"bench-workers-{i}", "labels": labels, "annotations": labels},
        "spec": {
            "suspend": True,
            "parallelism": 4,
            "completions": 4,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": labels, "annotations": labels},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


async def create_jobs(client: KubeClient, namespace: str, count: int) -> None:
    semaphore = asyncio.Semaphore(50)

    async def one(i: int) -> None:
        async with semaphore:
            await client.create(JOBS.path(namespace), job(i))

    await asyncio.gather(*(one(i) for i in range(count)))


async def measure(
    client: KubeClient, namespace: str, transform: Any, label: str, compact: bool = False
) -> float:
    gc.collect()
    tracemalloc.start()
    lag = LoopLagMonitor(interval=0.01)
    lag_task = asyncio.create_task(lag.run())
    informer = Informer(client, JOBS, namespace=namespace, transform=transform, compact=compact)
    started = time.perf_counter()
    task = asyncio.create_task(informer.run())
    await informer.wait_synced()
    took = time.perf_counter() - started
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    task.cancel()
    lag_task.cancel()
    await asyncio.gather(task, lag_task, return_exceptions=True)
    per_object = current / max(len(informer.store), 1)
    print(
        f"  {label:<10} sync {len(informer.store)} jobs in {took * 1000:7.1f} ms; "
        f"{per_object / 1024:6.1f} KiB/job retained; worst loop lag {lag.max_lag * 1000:6.1f} ms"
    )
    return per_object


async def typed_baseline(client: KubeClient, namespace: str) -> None:
    from kubernetes import client as k8s

    body = await client.get(JOBS.path(namespace))
    api = k8s.ApiClient()
    started = time.perf_counter()
    items = [api._ApiClient__deserialize(item, "V1Job") for item in body["items"]]  # type: ignore[attr-defined]
    took = time.perf_counter() - started
    print(f"  typed      deserialise {len(items)} jobs into V1Job: {took * 1000:7.1f} ms")


async def main_async(count: int) -> None:
    with ControlPlane() as plane:
        client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig))
        try:
            namespace = "bench"
            await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
            started = time.perf_counter()
            await create_jobs(client, namespace, count)
            print(f"created {count} Jobs in {time.perf_counter() - started:.1f} s")
            raw = await measure(client, namespace, strip_managed_fields, "untrimmed")
            trimmed = await measure(client, namespace, trim_job, "trimmed")
            compact = await measure(client, namespace, trim_job, "compact", compact=True)
            print(f"  ratio      trimmed/untrimmed memory per job: {trimmed / raw:.2f}")
            print(f"  ratio      compact (as the controller caches)/untrimmed: {compact / raw:.2f}")
            try:
                await typed_baseline(client, namespace)
            except Exception as error:
                print(f"  typed      baseline unavailable: {error}")
        finally:
            await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main_async(args.jobs))


if __name__ == "__main__":
    main()
