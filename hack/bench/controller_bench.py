"""Benchmark: the controller under load on a real apiserver (numbers and ratios, no pass/fail).

For each worker count: N JobSets of 3 Jobs each are created at once; the bench measures the time
until every Job exists, then (playing the Job controller with KubeSim) completes every Job and
measures the time until every JobSet is Completed. It reports reconciles, API writes, the worst
event-loop lag (the figure that threatens lease renewal) and the process's peak RSS.

Run: .venv/bin/python hack/bench/controller_bench.py [--jobsets 100] [--workers 1 4]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from typing import Any

from jobset_controller.config import Configuration
from jobset_controller.controller.resources import JOBSETS
from jobset_controller.manager import Manager, ManagerOptions
from jobset_controller.runtime.client import KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job


def jobset(name: str) -> dict[str, Any]:
    def rjob(rname: str, replicas: int) -> dict[str, Any]:
        return replicated_job(rname, replicas, backoff_limit=0)

    return jobset_manifest(name, replicated_jobs=[rjob("leader", 1), rjob("workers", 2)])


def sample(manager: Manager, name: str, **labels: str) -> float:
    return float(manager.registry.get_sample_value(name, labels) or 0.0)


def writes(manager: Manager) -> float:
    return sum(
        float(s.value)
        for metric in manager.registry.collect()
        if metric.name == "rest_client_requests"
        for s in metric.samples
        if s.name.endswith("_total") and s.labels["method"] in ("POST", "PUT", "PATCH", "DELETE")
    )


async def wait(check: Any, limit: float = 600.0) -> float:
    started = time.perf_counter()
    while not await check():
        if time.perf_counter() - started > limit:
            raise TimeoutError("bench condition not reached")
        await asyncio.sleep(0.05)
    return time.perf_counter() - started


async def run_once(plane: ControlPlane, count: int, workers: int) -> dict[str, float]:
    namespace = f"bench-w{workers}"
    plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    client = await KubeClient.connect(kubeconfig=str(plane.kubeconfig))
    sim = KubeSim(client, namespace)
    manager = Manager(
        ManagerOptions(
            config=Configuration(),
            kubeconfig=str(plane.kubeconfig),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            leader_elect=False,
            workers=workers,
        )
    )
    task = asyncio.create_task(manager.run())
    while not manager.caches_synced():  # noqa: ASYNC110 - polling the manager
        await asyncio.sleep(0.05)
    controller = manager.controller
    assert controller is not None
    assert manager.lag is not None
    manager.lag.reset_max()
    base = JOBSETS.path(namespace)

    async def create_all() -> None:
        semaphore = asyncio.Semaphore(20)

        async def one(i: int) -> None:
            async with semaphore:
                await client.create(base, jobset(f"js-{i}"))

        await asyncio.gather(*(one(i) for i in range(count)))

    async def all_jobs() -> bool:
        return len(controller.jobs.store.by_index("namespace", namespace)) == 3 * count

    started = time.perf_counter()
    await create_all()
    await wait(all_jobs)
    to_jobs = time.perf_counter() - started

    names = [j["metadata"]["name"] for j in controller.jobs.store.by_index("namespace", namespace)]
    started = time.perf_counter()
    semaphore = asyncio.Semaphore(20)

    async def complete(name: str) -> None:
        async with semaphore:
            await sim.complete(name)

    await asyncio.gather(*(complete(n) for n in names))

    async def all_completed() -> bool:
        return all(
            (js.get("status") or {}).get("terminalState") == "Completed"
            for js in controller.jobsets.store.by_index("namespace", namespace)
        )

    await wait(all_completed)
    to_completed = time.perf_counter() - started
    result = {
        "jobs_s": to_jobs,
        "completed_s": to_completed,
        "reconciles": sample(
            manager, "controller_runtime_reconcile_total", controller="jobset", result="success"
        ),
        "writes": writes(manager),
        "max_lag_ms": manager.lag.max_lag * 1000,
    }
    manager.request_stop()
    await task
    await client.close()
    return result


async def main_async(count: int, worker_counts: list[int]) -> None:
    with ControlPlane() as plane:
        results = {}
        for workers in worker_counts:
            r = await run_once(plane, count, workers)
            results[workers] = r
            print(
                f"workers={workers}: {count} JobSets -> {3 * count} Jobs in {r['jobs_s']:.2f} s; "
                f"all Completed {r['completed_s']:.2f} s after the Jobs finished; "
                f"{r['reconciles']:.0f} reconciles, {r['writes']:.0f} writes; "
                f"worst loop lag {r['max_lag_ms']:.1f} ms"
            )
        if len(results) > 1:
            first, *rest = worker_counts
            for w in rest:
                ratio = results[first]["jobs_s"] / results[w]["jobs_s"]
                print(f"speed-up of workers={w} over workers={first} (Jobs created): {ratio:.2f}x")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process (controller + bench client): {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobsets", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    asyncio.run(main_async(args.jobsets, args.workers))


if __name__ == "__main__":
    main()
