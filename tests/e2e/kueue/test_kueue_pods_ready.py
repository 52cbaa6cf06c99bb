"""Kueue's waitForPodsReady against our ready counts: a JobSet whose pods never become Ready.

Kueue decides "pods ready" from our status alone (the sum of `ready` and `succeeded` over
`replicatedJobsStatus` must reach the number of Jobs), so this is where a wrong count of ours
would show: Kueue would never evict (counts too high) or would evict a healthy JobSet (too low).
The settings are global to Kueue, so this module runs its own Kueue with a short timeout (20 s
from admission: short, yet long enough for the whole chain from Kueue's unsuspend through our
Jobs, the pods, kwok and the Job controller's ready count to our status and Kueue's PodsReady on
a slow, loaded machine; 8 s was not): one requeue with a 5 s backoff base (the JobSet stays
suspended that long between eviction and readmission, long enough to be observed), then
deactivation.

Faults found: none in the controller; our ready counts trip and satisfy Kueue's check as they
should. Harness: Kueue treats a zero `backoffBaseSeconds` as unset (60 s), so it is set (to 5).
"""

from __future__ import annotations

from typing import Any

import pytest

from jobset_controller_dev.envtest.kueue_objects import (
    KueueNamespace,
    condition,
    is_true,
    jobset,
    rjob,
)
from jobset_controller_dev.envtest.kwok_stages import (
    READY_AFTER_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.nodes import RACK_LABEL

pytestmark = pytest.mark.kueue

KUEUE_OPTIONS = {
    "wait_for_pods_ready": {
        "timeout": "20s",
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffLimitCount": 1,
            "backoffBaseSeconds": 5,
            "backoffMaxSeconds": 10,
        },
    }
}


def requeue_count(wl: dict[str, Any]) -> int:
    return int(((wl.get("status") or {}).get("requeueState") or {}).get("count") or 0)


def assert_status_consistent(js: dict[str, Any], *, suspended: bool) -> None:
    """What our status must say whenever Kueue has the JobSet suspended or running: never a
    terminal state or a restart (an eviction is not a failure), Suspended as the spec says, and
    nothing counted ready (no pod ever is)."""
    status = js.get("status") or {}
    assert status.get("terminalState") is None, status
    assert (status.get("restarts") or 0) == 0, status
    assert is_true(js, "Suspended") == suspended, status.get("conditions")
    for rj in status.get("replicatedJobsStatus") or ():
        assert rj.get("ready", 0) == 0, rj
        assert rj.get("succeeded", 0) == 0, rj
        assert rj.get("failed", 0) == 0, rj


def test_pods_never_ready_evict_requeue_then_deactivate(kenv: KueueNamespace) -> None:
    """Evicted with PodsReadyTimeout 20 s after admission (suspended for the 5 s backoff),
    requeued once and readmitted (running again), evicted again 20 s later and then deactivated
    (spec.active false), leaving the JobSet suspended for good with its pods gone; our status
    stays consistent at every step. About 45 s."""
    flavor = kenv.flavor("rack3", {RACK_LABEL: "rack-3"})
    cq = kenv.cluster_queue("cq", [(flavor, "8")])
    kenv.local_queue("lq", cq)
    never_ready = {READY_AFTER_ANNOTATION: "1h", RUN_FOREVER_ANNOTATION: "true"}
    kenv.create_jobset(jobset("stuck", rjob("workers", replicas=2, annotations=never_ready)))

    kenv.wait_workload("stuck", lambda w: is_true(w, "Admitted"), "admitted")
    kenv.wait_pods(
        "stuck",
        lambda ps: len(ps) == 2 and all(p["status"].get("phase") == "Running" for p in ps),
        "running, not ready",
    )
    js = kenv.wait_jobset(
        "stuck",
        lambda j: (
            sum(r.get("active", 0) for r in j["status"].get("replicatedJobsStatus") or ()) == 2
        ),
        "2 active Jobs",
    )
    assert_status_consistent(js, suspended=False)

    wl = kenv.wait_workload(
        "stuck", lambda w: requeue_count(w) == 1, "evicted once (PodsReadyTimeout)", timeout=60
    )
    evicted = condition(wl, "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "PodsReadyTimeout", evicted
    js = kenv.wait_jobset("stuck", lambda j: is_true(j, "Suspended"), "suspended by the eviction")
    assert_status_consistent(js, suspended=True)

    # Requeued after the backoff (about 5 s) and admitted again: the JobSet runs again.
    kenv.wait_workload(
        "stuck",
        lambda w: requeue_count(w) == 1 and is_true(w, "Admitted"),
        "readmitted",
        timeout=30,
    )
    js = kenv.wait_jobset(
        "stuck",
        lambda j: j["spec"].get("suspend") is False and not is_true(j, "Suspended"),
        "resumed",
        timeout=30,
    )
    assert_status_consistent(js, suspended=False)
    kenv.wait_pods("stuck", lambda ps: len(ps) == 2, "pods again")

    wl = kenv.wait_workload(
        "stuck",
        lambda w: w["spec"].get("active") is False,
        "deactivated after the second timeout",
        timeout=60,
    )
    js = kenv.wait_jobset(
        "stuck",
        lambda j: j["spec"].get("suspend") is True and is_true(j, "Suspended"),
        "suspended for good",
    )
    kenv.wait_pods("stuck", lambda ps: not ps, "pods gone")
    js = kenv.get_jobset("stuck")
    assert_status_consistent(js, suspended=True)
    jobs = kenv.jobs("stuck")
    assert len(jobs) == 2
    assert all(j["spec"].get("suspend") is True for j in jobs)


def test_pods_that_become_ready_keep_their_admission(kenv: KueueNamespace) -> None:
    """The other side of the same count: pods Ready after 1 s and running 25 s, past the 20 s
    timeout, give the Workload PodsReady=True from our `ready` counts, and the JobSet is never
    evicted. A count of ours that stayed low would have Kueue evict a healthy JobSet here (its
    pods cannot succeed before the timeout). About 30 s."""
    flavor = kenv.flavor("rack3", {RACK_LABEL: "rack-3"})
    cq = kenv.cluster_queue("cq", [(flavor, "8")])
    kenv.local_queue("lq", cq)
    slow = {READY_AFTER_ANNOTATION: "1s", RUN_DURATION_ANNOTATION: "25s"}
    kenv.create_jobset(
        jobset(
            "healthy",
            rjob("leader", annotations=slow),
            rjob("workers", replicas=2, pods=2, annotations=slow),
        )
    )
    kenv.wait_workload("healthy", lambda w: is_true(w, "PodsReady"), "PodsReady", timeout=30)
    js = kenv.wait_jobset(
        "healthy",
        lambda j: (j.get("status") or {}).get("terminalState") == "Completed",
        "completed",
        timeout=90,
    )
    assert (js["status"].get("restarts") or 0) == 0
    wl = kenv.workload_of("healthy")
    assert wl is not None
    assert requeue_count(wl) == 0
    evicted = condition(wl, "Evicted")
    assert evicted is None or evicted["status"] == "False", evicted
