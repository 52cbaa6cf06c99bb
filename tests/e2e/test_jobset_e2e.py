"""JobSets end to end: `jobset-controller run` + the real Job controller, scheduler, GC and kwok.

Pods are simulated by kwok stages (envtest/kwok_stages.py): they run for a short time and
succeed, unless an annotation makes them fail, run forever, or become ready late.
"""

from __future__ import annotations

import copy
import datetime
import subprocess
from typing import Any

import pytest

from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    READY_AFTER_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import NAMESPACED_JOB_LABEL, RACK_LABEL

pytestmark = pytest.mark.usefixtures("jobset_controller")

RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def rjob(
    name: str, *, replicas: int = 1, pods: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return replicated_job(
        name,
        replicas,
        pods=pods,
        backoff_limit=0,
        annotations={RUN_DURATION_ANNOTATION: "1s", **(annotations or {})},
    )


def jobset(name: str, *rjobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return jobset_manifest(name, replicated_jobs=rjobs, **spec)


class E2E:
    def __init__(self, cluster: FullCluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace

    def jobsets(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.ns}/jobsets"
        return f"{base}/{name}" if name else base

    def create(self, body: dict[str, Any]) -> None:
        status, reply = self.cluster.request("POST", self.jobsets(), body)
        assert status == 201, reply

    def wait_terminal(self, name: str, state: str, timeout: float = 60) -> dict[str, Any]:
        """The JobSet once it ends in `state` (`FullCluster.wait_for`, which scales `timeout`)."""
        return self.cluster.wait_for(
            self.jobsets(name),
            lambda js: (js.get("status") or {}).get("terminalState") == state,
            timeout=timeout,
            what=f"JobSet {name} {state}",
        )

    def jobs(self, jobset_name: str) -> list[dict[str, Any]]:
        return self.cluster.list_items(
            f"/apis/batch/v1/namespaces/{self.ns}/jobs",
            label_selector=f"{JOBSET_NAME}={jobset_name}",
        )

    def pods(self, jobset_name: str) -> list[dict[str, Any]]:
        return self.cluster.list_items(
            f"/api/v1/namespaces/{self.ns}/pods", label_selector=f"{JOBSET_NAME}={jobset_name}"
        )

    def node_racks(self) -> dict[str, str]:
        return {
            n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL]
            for n in self.cluster.list_items("/api/v1/nodes")
            if RACK_LABEL in n["metadata"]["labels"]
        }


@pytest.fixture
def e2e(full_cluster: FullCluster, namespace: str) -> E2E:
    return E2E(full_cluster, namespace)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_two_replicated_jobs_run_to_completion_with_pod_dns_endpoints(e2e: E2E) -> None:
    e2e.create(
        jobset(
            "train",
            rjob("leader", annotations={RUN_DURATION_ANNOTATION: "4s"}),
            rjob("workers", replicas=2, pods=2, annotations={RUN_DURATION_ANNOTATION: "4s"}),
        )
    )
    expected = {
        "train-leader-0-0",
        "train-workers-0-0",
        "train-workers-0-1",
        "train-workers-1-0",
        "train-workers-1-1",
    }

    # Every pod must get an endpoint with its hostname. A pod leaves the slices when it succeeds
    # and pods start at different times, so collect what each poll shows instead of demanding
    # all five at one moment.
    seen: set[str] = set()

    def all_seen(body: dict[str, Any]) -> bool:
        seen.update(
            endpoint.get("hostname", "")
            for slice_ in body.get("items") or ()
            for endpoint in slice_.get("endpoints") or ()
        )
        return seen >= expected

    e2e.cluster.wait_for(
        f"/apis/discovery.k8s.io/v1/namespaces/{e2e.ns}/endpointslices"
        "?labelSelector=kubernetes.io%2Fservice-name%3Dtrain",
        all_seen,
        what="EndpointSlices of the headless Service",
    )
    assert seen == expected
    js = e2e.wait_terminal("train", "Completed")
    cond = condition(js, "Completed")
    assert cond is not None
    assert cond["reason"] == "AllJobsCompleted"
    pods = e2e.pods("train")
    assert all(p["spec"]["subdomain"] == "train" for p in pods)
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)


def test_failed_pod_restarts_the_jobset_which_then_completes(e2e: E2E) -> None:
    """Pods run until the test lets them end (run-forever), so no step races their run time:
    one pod of the first attempt is made to fail, then the restarted attempt's pods, once
    Ready, are let succeed."""
    e2e.create(
        jobset(
            "flaky",
            rjob("workers", replicas=2, annotations={RUN_FOREVER_ANNOTATION: "true"}),
            failurePolicy={"maxRestarts": 2},
        )
    )
    pods_path = f"/api/v1/namespaces/{e2e.ns}/pods?labelSelector={JOBSET_NAME}%3Dflaky"

    def end(pod: dict[str, Any], annotations: dict[str, str]) -> None:
        status, reply = e2e.cluster.request(
            "PATCH",
            f"/api/v1/namespaces/{e2e.ns}/pods/{pod['metadata']['name']}",
            {"metadata": {"annotations": {RUN_FOREVER_ANNOTATION: "false", **annotations}}},
            content_type="application/merge-patch+json",
        )
        assert status == 200, reply

    def ready(pod: dict[str, Any]) -> bool:
        return (c := condition(pod, "Ready")) is not None and c["status"] == "True"

    pod = e2e.cluster.wait_for(
        pods_path,
        lambda body: len(body.get("items") or ()) == 2,
        what="first attempt's pods",
    )["items"][0]
    # Make one pod of the first attempt fail (the template stays healthy for the next attempt).
    end(pod, {FAIL_EXIT_CODE_ANNOTATION: "1"})
    # Then let the restarted attempt's pods succeed.
    restarted = e2e.cluster.wait_for(
        f"{pods_path}%2C{RESTART_ATTEMPT}%3D1",
        lambda body: len(items := body.get("items") or ()) == 2 and all(map(ready, items)),
        timeout=90,
        what="restarted attempt's pods Ready",
    )["items"]
    for pod in restarted:
        end(pod, {})
    js = e2e.wait_terminal("flaky", "Completed", timeout=90)
    assert js["status"]["restarts"] == 1
    jobs = e2e.jobs("flaky")
    assert {j["metadata"]["labels"][RESTART_ATTEMPT] for j in jobs} == {"1"}
    assert {p["metadata"]["labels"][RESTART_ATTEMPT] for p in e2e.pods("flaky")} == {"1"}


def test_exhausted_max_restarts_fail_the_jobset(e2e: E2E) -> None:
    e2e.create(
        jobset(
            "doomed",
            rjob("workers", annotations={FAIL_EXIT_CODE_ANNOTATION: "3"}),
            failurePolicy={"maxRestarts": 1},
        )
    )
    js = e2e.wait_terminal("doomed", "Failed", timeout=90)
    cond = condition(js, "Failed")
    assert cond is not None
    assert cond["reason"] == "ReachedMaxRestarts"
    assert js["status"]["restarts"] == 1


def test_depends_on_creates_the_trainer_only_after_the_initializer_completes(e2e: E2E) -> None:
    trainer = rjob("trainer", replicas=2)
    trainer["dependsOn"] = [{"name": "initializer", "status": "Complete"}]
    e2e.create(
        jobset("staged", rjob("initializer", annotations={RUN_DURATION_ANNOTATION: "2s"}), trainer)
    )
    e2e.wait_terminal("staged", "Completed", timeout=90)
    jobs = {j["metadata"]["name"]: j for j in e2e.jobs("staged")}
    init_done = condition(jobs["staged-initializer-0"], "Complete")
    assert init_done is not None
    for name in ("staged-trainer-0", "staged-trainer-1"):
        created = parse_time(jobs[name]["metadata"]["creationTimestamp"])
        assert created >= parse_time(init_done["lastTransitionTime"])


def test_in_order_startup_creates_workers_only_after_the_driver_is_ready(e2e: E2E) -> None:
    e2e.create(
        jobset(
            "ordered",
            rjob(
                "driver", annotations={READY_AFTER_ANNOTATION: "3s", RUN_FOREVER_ANNOTATION: "true"}
            ),
            rjob("workers", replicas=2, annotations={RUN_FOREVER_ANNOTATION: "true"}),
            startupPolicy={"startupPolicyOrder": "InOrder"},
        )
    )
    e2e.cluster.wait_for(
        e2e.jobsets("ordered"),
        lambda js: (
            (c := condition(js, "StartupPolicyCompleted")) is not None and c["status"] == "True"
        ),
        timeout=60,
        what="InOrder startup completed",
    )
    driver_pod = next(
        p
        for p in e2e.pods("ordered")
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "driver"
    )
    ready = condition(driver_pod, "Ready")
    assert ready is not None
    assert ready["status"] == "True"
    jobs = {j["metadata"]["name"]: j for j in e2e.jobs("ordered")}
    for name in ("ordered-workers-0", "ordered-workers-1"):
        assert parse_time(jobs[name]["metadata"]["creationTimestamp"]) >= parse_time(
            ready["lastTransitionTime"]
        )


def placement(e2e: E2E, name: str) -> dict[str, set[str]]:
    """Job name -> racks its pods landed on (from the scheduler's bindings)."""
    racks = e2e.node_racks()
    out: dict[str, set[str]] = {}
    for pod in e2e.pods(name):
        job = pod["metadata"]["labels"]["job-name"]
        out.setdefault(job, set()).add(racks[pod["spec"]["nodeName"]])
    return out


def assert_exclusive(by_job: dict[str, set[str]], jobs: int) -> None:
    assert len(by_job) == jobs
    assert all(len(racks) == 1 for racks in by_job.values()), by_job
    used = [next(iter(racks)) for racks in by_job.values()]
    assert len(set(used)) == len(used), f"two Jobs share a rack: {by_job}"


def test_exclusive_placement_with_pod_affinity_puts_each_job_alone_on_one_rack(e2e: E2E) -> None:
    body = jobset(
        "excl", rjob("slice", replicas=2, pods=2, annotations={RUN_FOREVER_ANNOTATION: "true"})
    )
    body["metadata"]["annotations"] = {"alpha.jobset.sigs.k8s.io/exclusive-topology": RACK_LABEL}
    e2e.create(body)
    e2e.cluster.wait_for(
        f"/api/v1/namespaces/{e2e.ns}/pods?labelSelector={JOBSET_NAME}%3Dexcl",
        lambda b: (
            len(b.get("items") or ()) == 4 and all(p["spec"].get("nodeName") for p in b["items"])
        ),
        timeout=60,
        what="all exclusive pods scheduled",
    )
    assert_exclusive(placement(e2e, "excl"), jobs=2)


def test_exclusive_placement_with_node_selector_strategy(e2e: E2E) -> None:
    racks = e2e.node_racks()
    nodes_of = {
        rack: sorted(n for n, r in racks.items() if r == rack) for rack in set(racks.values())
    }
    targets = {"nsel-slice-0": "rack-1", "nsel-slice-1": "rack-3"}
    for job, rack in targets.items():
        e2e.cluster.label_nodes(nodes_of[rack], {NAMESPACED_JOB_LABEL: f"{e2e.ns}_{job}"})
    try:
        body = jobset(
            "nsel", rjob("slice", replicas=2, pods=2, annotations={RUN_FOREVER_ANNOTATION: "true"})
        )
        body["metadata"]["annotations"] = {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK_LABEL,
            "alpha.jobset.sigs.k8s.io/node-selector": "true",
        }
        e2e.create(body)
        e2e.cluster.wait_for(
            f"/api/v1/namespaces/{e2e.ns}/pods?labelSelector={JOBSET_NAME}%3Dnsel",
            lambda b: (
                len(b.get("items") or ()) == 4
                and all(p["spec"].get("nodeName") for p in b["items"])
            ),
            timeout=60,
            what="all node-selector pods scheduled",
        )
        by_job = placement(e2e, "nsel")
        assert_exclusive(by_job, jobs=2)
        assert {job: next(iter(r)) for job, r in by_job.items()} == targets
    finally:
        all_nodes = [n for names in nodes_of.values() for n in names]
        e2e.cluster.label_nodes(all_nodes, {NAMESPACED_JOB_LABEL: None})


def test_suspend_change_node_selector_resume_runs_pods_with_the_new_selector(e2e: E2E) -> None:
    body = jobset(
        "paused",
        rjob("workers", replicas=2, annotations={RUN_FOREVER_ANNOTATION: "true"}),
        suspend=True,
    )
    e2e.create(body)
    e2e.cluster.wait_for(
        e2e.jobsets("paused"),
        lambda js: (c := condition(js, "Suspended")) is not None and c["status"] == "True",
        what="suspended",
    )
    assert e2e.pods("paused") == []
    status, js = e2e.cluster.request("GET", e2e.jobsets("paused"))
    spec = copy.deepcopy(js["spec"])
    spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        RACK_LABEL: "rack-2"
    }
    spec["suspend"] = False
    status, reply = e2e.cluster.request(
        "PATCH", e2e.jobsets("paused"), {"spec": spec}, content_type="application/merge-patch+json"
    )
    assert status == 200, reply
    e2e.cluster.wait_for(
        f"/api/v1/namespaces/{e2e.ns}/pods?labelSelector={JOBSET_NAME}%3Dpaused",
        lambda b: (
            len(b.get("items") or ()) == 2 and all(p["spec"].get("nodeName") for p in b["items"])
        ),
        timeout=60,
        what="resumed pods scheduled",
    )
    racks = e2e.node_racks()
    for pod in e2e.pods("paused"):
        assert pod["spec"]["nodeSelector"] == {RACK_LABEL: "rack-2"}
        assert racks[pod["spec"]["nodeName"]] == "rack-2"


def test_ttl_deletes_a_finished_jobset_and_gc_removes_everything(e2e: E2E) -> None:
    """With a 2 s TTL the JobSet may be gone before a poll sees it Completed; nothing else deletes
    it, so gone means finished and deleted by the TTL. Its AllJobsCompleted Event, which outlives
    it, proves it completed."""
    e2e.create(jobset("shortlived", rjob("workers", replicas=2), ttlSecondsAfterFinished=2))
    e2e.cluster.wait_for(
        e2e.jobsets("shortlived"),
        lambda js: not js or (js.get("status") or {}).get("terminalState") == "Completed",
        timeout=60,
        what="JobSet shortlived Completed (or already deleted)",
    )
    e2e.cluster.wait_for(
        e2e.jobsets("shortlived"), lambda js: not js, timeout=60, what="JobSet gone"
    )
    e2e.cluster.wait_for(
        f"/apis/events.k8s.io/v1/namespaces/{e2e.ns}/events",
        lambda body: any(
            e["regarding"].get("name") == "shortlived" and e.get("reason") == "AllJobsCompleted"
            for e in body.get("items") or ()
        ),
        what="JobSet shortlived's AllJobsCompleted Event",
    )
    assert_nothing_left(e2e, "shortlived")


def test_foreground_deletion_of_a_running_jobset_leaves_nothing_behind(e2e: E2E) -> None:
    e2e.create(
        jobset("running", rjob("workers", replicas=2, annotations={RUN_FOREVER_ANNOTATION: "true"}))
    )
    e2e.cluster.wait_for(
        f"/api/v1/namespaces/{e2e.ns}/pods?labelSelector={JOBSET_NAME}%3Drunning",
        lambda b: len(b.get("items") or ()) == 2,
        what="pods running",
    )
    status, reply = e2e.cluster.request(
        "DELETE",
        e2e.jobsets("running"),
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
    )
    assert status in (200, 202), reply
    e2e.cluster.wait_for(e2e.jobsets("running"), lambda js: not js, timeout=60, what="JobSet gone")
    assert_nothing_left(e2e, "running")


def assert_nothing_left(e2e: E2E, name: str) -> None:
    e2e.cluster.wait_for(
        f"/api/v1/namespaces/{e2e.ns}/pods?labelSelector={JOBSET_NAME}%3D{name}",
        lambda b: not b.get("items"),
        timeout=60,
        what="pods gone",
    )
    assert e2e.jobs(name) == []
    status, _ = e2e.cluster.request("GET", f"/api/v1/namespaces/{e2e.ns}/services/{name}")
    assert status == 404


def test_kubectl_shows_a_completed_jobset(e2e: E2E) -> None:
    e2e.create(jobset("shown", rjob("workers")))
    e2e.wait_terminal("shown", "Completed")
    out = subprocess.run(
        [
            str(e2e.cluster.bin_dir / "kubectl"),
            f"--kubeconfig={e2e.cluster.kubeconfig}",
            "get",
            "jobsets",
            "-n",
            e2e.ns,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = out.splitlines()[1].split()
    assert row[:4] == ["shown", "Completed", "0", "True"]
