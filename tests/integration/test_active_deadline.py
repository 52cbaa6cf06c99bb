"""The active deadline on a real apiserver (gate JobSetActiveDeadlineSeconds on;
docs/behaviour.md#active-deadline).

No Job controller runs here, so the child Jobs never start nor finish: after the pass that
created them nothing changes in the cluster, and only the requeue the deadline asks for can wake
the JobSet. Each wait is on what the API server shows, or on the pass that saw a change.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.integration.conftest import Passes, running_controller

from jobset_controller.manager import Manager
from jobset_controller.runtime.client import Invalid, KubeClient
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import eventually

pytestmark = pytest.mark.integration

DEADLINE_MESSAGE = "JobSet was active for longer than the specified deadline of 2 seconds"


@pytest.fixture
async def deadline_controller(
    controller_account: tuple[str, Path], tmp_path: Path
) -> AsyncIterator[Manager]:
    """The controller with the JobSetActiveDeadlineSeconds gate, as the shipped ServiceAccount."""
    gates = {"JobSetActiveDeadlineSeconds": True}
    async with running_controller(controller_account, tmp_path, feature_gates=gates) as manager:
        yield manager


def jobset(name: str = "js", **spec: Any) -> dict[str, Any]:
    workers = replicated_job("workers", 2, pods=1, backoff_limit=0)
    return jobset_manifest(name, replicated_jobs=[workers], **spec)


def jobsets(namespace: str, name: str = "") -> str:
    base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    return f"{base}/{name}" if name else base


def condition(js: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for found in (js.get("status") or {}).get("conditions") or ():
        if found["type"] == kind:
            return dict(found)
    return None


def seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def live_jobs(sim: KubeSim) -> list[str]:
    """Names of the Jobs not being deleted (no garbage collector runs: deleted ones linger)."""
    return [
        j["metadata"]["name"]
        for j in await sim.jobs()
        if not j["metadata"].get("deletionTimestamp")
    ]


async def test_a_jobset_whose_jobs_never_finish_fails_at_its_deadline_and_loses_its_jobs(
    deadline_controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    await kube.create(jobsets(namespace), jobset(activeDeadlineSeconds=2))

    async def two_jobs() -> bool:
        return len(await live_jobs(sim)) == 2

    await eventually(two_jobs, "2 Jobs", 45.0)

    async def failed() -> bool:
        return condition(await kube.get(jobsets(namespace, "js")), "Failed") is not None

    await eventually(failed, "Failed", 45.0)
    js = await kube.get(jobsets(namespace, "js"))
    cause = condition(js, "Failed")
    assert cause is not None
    assert (cause["status"], cause["reason"], cause["message"]) == (
        "True",
        "DeadlineExceeded",
        DEADLINE_MESSAGE,
    )
    assert js["status"]["terminalState"] == "Failed"
    assert seconds(cause["lastTransitionTime"]) - seconds(js["status"]["startTime"]) >= 2

    async def jobs_deleted() -> bool:
        return await live_jobs(sim) == []

    await eventually(jobs_deleted, "the Jobs deleted", 45.0)
    labels = {"jobset_name": "js", "namespace": namespace}
    registry = deadline_controller.registry
    assert registry.get_sample_value("jobset_active_deadline_exceeded_total", labels) == 1.0
    assert registry.get_sample_value("jobset_failed_total", labels) == 1.0


async def test_a_suspended_jobset_gets_no_start_time_and_does_not_fail(
    deadline_controller: Manager, kube: KubeClient, namespace: str, passes: Passes
) -> None:
    await kube.create(jobsets(namespace), jobset(suspend=True, activeDeadlineSeconds=2))

    async def suspended() -> bool:
        js = await kube.get(jobsets(namespace, "js"))
        marked = condition(js, "Suspended")
        return marked is not None and marked["status"] == "True"

    await eventually(suspended, "Suspended", 45.0)
    assert "startTime" not in (await kube.get(jobsets(namespace, "js")))["status"]
    # A start time long past (another writer's): the pass it wakes removes it and fails nothing.
    mark = passes.mark()
    await kube.merge_patch(
        jobsets(namespace, "js") + "/status", {"status": {"startTime": "2020-01-01T00:00:00Z"}}
    )
    seen = await passes.first(
        f"{namespace}/js",
        lambda p: p.snapshot.jobset.status.start_time is not None,
        "the pass that saw the start time",
        since=mark,
    )
    assert seen.plan.status is not None
    assert "startTime" not in seen.plan.status
    assert not seen.plan.failed
    assert seen.plan.requeue_after is None

    async def removed() -> bool:
        return "startTime" not in (await kube.get(jobsets(namespace, "js")))["status"]

    await eventually(removed, "startTime removed", 45.0)
    assert condition(await kube.get(jobsets(namespace, "js")), "Failed") is None


async def test_a_resumed_jobset_starts_its_clock_at_the_resume(
    deadline_controller: Manager, kube: KubeClient, namespace: str
) -> None:
    await kube.create(jobsets(namespace), jobset(suspend=True, activeDeadlineSeconds=2))

    async def suspended() -> bool:
        return condition(await kube.get(jobsets(namespace, "js")), "Suspended") is not None

    await eventually(suspended, "Suspended", 45.0)
    assert "startTime" not in (await kube.get(jobsets(namespace, "js")))["status"]
    resumed_at = int(time.time())  # startTime is in whole seconds, cut like this
    await kube.merge_patch(jobsets(namespace, "js"), {"spec": {"suspend": False}})

    async def failed() -> bool:
        return condition(await kube.get(jobsets(namespace, "js")), "Failed") is not None

    await eventually(failed, "Failed", 45.0)
    js = await kube.get(jobsets(namespace, "js"))
    cause = condition(js, "Failed")
    assert cause is not None
    assert cause["reason"] == "DeadlineExceeded"
    assert seconds(js["status"]["startTime"]) >= resumed_at
    assert seconds(cause["lastTransitionTime"]) - seconds(js["status"]["startTime"]) >= 2


@pytest.mark.parametrize("value", [0, -1])
async def test_the_api_server_refuses_a_deadline_below_one_with_its_path(
    kube: KubeClient, namespace: str, value: int
) -> None:
    with pytest.raises(Invalid) as info:
        await kube.create(jobsets(namespace), jobset(activeDeadlineSeconds=value))
    assert "spec.activeDeadlineSeconds" in info.value.message
    assert "should be greater than or equal to 1" in info.value.message
