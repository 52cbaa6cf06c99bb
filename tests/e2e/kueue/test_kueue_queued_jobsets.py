"""Queued JobSets through the real Kueue, with issue 27's three features on (our controller runs
with `ExecutionAttemptsTracking`, `MutablePodResourcesForSuspendedJobSets` and
`deferredChildren.enable`; this module has its own cluster for that):

- a JobSet waiting in the queue has no Jobs and no Service, yet its status counts its suspended
  Jobs (what Kueue and users read); admitted, it runs;
- preempted and readmitted twice, its runs are execution attempts 0, 1 and 2, and the pods of
  each run carry their number;
- right-sized while preempted (its container requests lowered), the readmitted run's pods have
  the new requests: the resume carried them into the suspended Jobs.

The rest of the suite runs with these off by default; `JOBSET_E2E_FEATURE_GATES` and
`JOBSET_E2E_DEFER_CHILDREN=1` run it with them on (conftest.suite_configuration).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.e2e.kueue.conftest import cluster_with_controller

from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kueue import KUEUE_API, PRIORITY_CLASS_LABEL
from jobset_controller_dev.envtest.kueue_objects import (
    KueueNamespace,
    condition,
    is_true,
    jobset,
    rjob,
)
from jobset_controller_dev.envtest.kwok_stages import (
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.nodes import KWOK_TYPE_LABEL, KWOK_TYPE_VALUE

pytestmark = pytest.mark.kueue

EXECUTION_ATTEMPT = "jobset.sigs.k8s.io/execution-attempt"
CONFIGURATION = {
    "featureGates": {
        "ExecutionAttemptsTracking": True,
        "MutablePodResourcesForSuspendedJobSets": True,
    },
    "deferredChildren": {"enable": True},
}


@pytest.fixture(scope="module")
def kueue_cluster() -> Iterator[FullCluster]:
    """This module's cluster: the suite's, with the three features on in our controller."""
    with cluster_with_controller(CONFIGURATION) as cluster:
        yield cluster


def running(pods: list[dict[str, Any]], count: int) -> bool:
    return len(pods) == count and all(
        p["status"].get("phase") == "Running" and p["spec"].get("nodeName") for p in pods
    )


def new_pods_running(seen: set[str]) -> Callable[[list[dict[str, Any]]], bool]:
    """Two pods running, none of them one of the `seen` (an earlier run's)."""
    old = frozenset(seen)
    return lambda ps: running([p for p in ps if p["metadata"]["uid"] not in old], 2)


def attempt_of(pod: dict[str, Any]) -> str | None:
    value = (pod["metadata"].get("annotations") or {}).get(EXECUTION_ATTEMPT)
    return None if value is None else str(value)


def cpu_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"])


def test_a_queued_jobset_has_no_jobs_or_service_until_admitted_then_runs(
    kenv: KueueNamespace,
) -> None:
    """Quota for 1 cpu, a JobSet asking for 2: Kueue holds it suspended. Meanwhile it has no Job
    and no Service, and its status counts 2 suspended Jobs with Suspended=True. More quota: it is
    admitted, its Jobs and Service appear, its pods run and it completes."""
    flavor = kenv.flavor("any", {KWOK_TYPE_LABEL: KWOK_TYPE_VALUE})
    cq = kenv.cluster_queue("cq", [(flavor, "1")])
    kenv.local_queue("lq", cq)
    kenv.create_jobset(jobset("queued", rjob("workers", replicas=2)))
    kenv.wait_workload("queued", lambda w: True, "created")

    def counted_suspended(js: dict[str, Any]) -> bool:
        entries = (js.get("status") or {}).get("replicatedJobsStatus") or []
        return is_true(js, "Suspended") and [e.get("suspended") for e in entries] == [2]

    kenv.wait_jobset("queued", counted_suspended, "Suspended with 2 suspended Jobs counted")
    assert kenv.jobs("queued") == []
    status, _ = kenv.cluster.request("GET", f"/api/v1/namespaces/{kenv.ns}/services/queued")
    assert status == 404, "no headless Service while the JobSet never ran"
    wl = kenv.workload_of("queued")
    assert wl is not None
    assert not is_true(wl, "Admitted")

    quota = [{"name": "cpu", "nominalQuota": "4"}]
    patch = {"spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": flavor, "resources": quota}]}]}}  # fmt: skip
    status, body = kenv.cluster.request(
        "PATCH",
        f"{KUEUE_API}/clusterqueues/{cq}",
        patch,
        content_type="application/merge-patch+json",
    )
    assert status == 200, body
    kenv.wait_workload("queued", lambda w: is_true(w, "Admitted"), "admitted")
    kenv.wait_pods("queued", lambda ps: running(ps, 2), "running")
    assert len(kenv.jobs("queued")) == 2
    status, _ = kenv.cluster.request("GET", f"/api/v1/namespaces/{kenv.ns}/services/queued")
    assert status == 200, "the Service is created at the first resume"
    js = kenv.wait_jobset(
        "queued", lambda j: (j.get("status") or {}).get("terminalState") == "Completed", "done"
    )
    assert js["status"]["executionAttempts"] == 0


def test_preempted_twice_each_run_is_an_execution_attempt_and_a_resize_reaches_the_jobs(
    kenv: KueueNamespace,
) -> None:
    """A low-priority JobSet (2 pods of 2 cpu, running until deleted) fills the queue's 4 cpu;
    twice a high-priority JobSet of 4 cpu preempts it and finishes, and Kueue readmits the low
    one. Its runs are attempts 0, 1 and 2 (status and every pod of the run). While preempted the
    first time its container request is lowered to 1 cpu: the pods of the next runs ask for 1."""
    flavor = kenv.flavor("any", {KWOK_TYPE_LABEL: KWOK_TYPE_VALUE})
    cq = kenv.cluster_queue(
        "cq", [(flavor, "4")], preemption={"withinClusterQueue": "LowerPriority"}
    )
    kenv.local_queue("lq", cq)
    low_class = kenv.priority_class("low", 10)
    high_class = kenv.priority_class("high", 1000)
    low = jobset(
        "low",
        rjob("workers", replicas=2, cpu="2", annotations={RUN_FOREVER_ANNOTATION: "true"}),
        labels={PRIORITY_CLASS_LABEL: low_class},
    )
    kenv.create_jobset(low)
    pods = kenv.wait_pods("low", lambda ps: running(ps, 2), "first run")
    assert {attempt_of(p) for p in pods} == {"0"}
    assert {cpu_of(p) for p in pods} == {"2"}
    seen_uids = {p["metadata"]["uid"] for p in pods}
    attempts = [kenv.get_jobset("low")["status"]["executionAttempts"]]

    for cycle in (1, 2):
        high = jobset(
            f"high-{cycle}",
            rjob("main", cpu="4", annotations={RUN_DURATION_ANNOTATION: "3s"}),
            labels={PRIORITY_CLASS_LABEL: high_class},
        )
        kenv.create_jobset(high)

        def preempted(js: dict[str, Any]) -> bool:
            return js["spec"].get("suspend") is True and is_true(js, "Suspended")

        kenv.wait_jobset("low", preempted, f"preempted ({cycle})")
        if cycle == 1:
            path = "/spec/replicatedJobs/0/template/spec/template/spec/containers/0/resources"
            resize = [{"op": "replace", "path": f"{path}/requests", "value": {"cpu": "1"}}]
            status, body = kenv.cluster.request(
                "PATCH", kenv.jobsets("low"), resize, content_type="application/json-patch+json"
            )
            assert status == 200, body
        kenv.wait_jobset(
            f"high-{cycle}",
            lambda j: (j.get("status") or {}).get("terminalState") == "Completed",
            f"high {cycle} done",
        )

        pods = kenv.wait_pods("low", new_pods_running(seen_uids), f"run {cycle}", timeout=90)
        fresh = [p for p in pods if p["metadata"]["uid"] not in seen_uids]
        assert {attempt_of(p) for p in fresh} == {str(cycle)}, [attempt_of(p) for p in fresh]
        assert {cpu_of(p) for p in fresh} == {"1"}, "the resize reached the resumed Jobs"
        seen_uids |= {p["metadata"]["uid"] for p in fresh}
        js = kenv.get_jobset("low")
        attempts.append(js["status"]["executionAttempts"])
        assert (js["status"].get("restarts") or 0) == 0, "a preemption is not a restart"
        suspended = condition(js, "Suspended")
        assert suspended is not None
        assert suspended["status"] == "False"

    assert attempts == [0, 1, 2]
