"""The JobSet controller on a real apiserver, with Job status written by the test (KubeSim)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.integration.conftest import CONTROLLER_ACCOUNT, Passes

from jobset_controller.manager import Manager
from jobset_controller.runtime.client import Conflict, KubeClient, NotFound
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.identities import service_account_user
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import eventually

RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def jobset(name: str = "js", **spec: Any) -> dict[str, Any]:
    def rjob(rname: str, replicas: int) -> dict[str, Any]:
        return replicated_job(rname, replicas, pods=1, backoff_limit=0)

    return jobset_manifest(name, replicated_jobs=[rjob("leader", 1), rjob("workers", 2)], **spec)


class Cluster:
    def __init__(self, kube: KubeClient, namespace: str, sim: KubeSim) -> None:
        self.kube, self.namespace, self.sim = kube, namespace, sim

    def path(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.namespace}/jobsets"
        return f"{base}/{name}" if name else base

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.kube.create(self.path(), body)

    async def get(self, name: str = "js") -> dict[str, Any]:
        return await self.kube.get(self.path(name))

    async def job_names(self) -> list[str]:
        return [j["metadata"]["name"] for j in await self.sim.jobs() if not _deleting(j)]


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def condition(js: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (js.get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def cluster_of(kube: KubeClient, namespace: str, sim: KubeSim) -> Cluster:
    return Cluster(kube, namespace, sim)


async def test_jobset_creates_its_jobs_and_headless_service(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    c = cluster_of(kube, namespace, sim)
    created = await c.create(jobset())

    async def jobs_exist() -> bool:
        return await c.job_names() == ["js-leader-0", "js-workers-0", "js-workers-1"]

    await eventually(jobs_exist, "jobs exist", 45.0)
    job = (await sim.jobs())[1]
    labels = job["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "js"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert labels["jobset.sigs.k8s.io/job-global-index"] == "1"
    assert labels[RESTART_ATTEMPT] == "0"
    [owner] = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "JobSet",
        "js",
        created["metadata"]["uid"],
    )
    assert job["spec"]["template"]["spec"]["subdomain"] == "js"
    service = await kube.get(f"/api/v1/namespaces/{namespace}/services/js")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "js"}


async def test_completing_all_jobs_completes_the_jobset(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset())
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    for name in await c.job_names():
        await sim.complete(name)

    async def completed() -> bool:
        js = await c.get()
        return (js.get("status") or {}).get("terminalState") == "Completed"

    await eventually(completed, "completed", 45.0)
    js = await c.get()
    cond = condition(js, "Completed")
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True",
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    statuses = {s["name"]: s for s in js["status"]["replicatedJobsStatus"]}
    assert statuses["workers"]["succeeded"] == 2


async def _count(c: Cluster, n: int) -> bool:
    return len(await c.job_names()) == n


async def test_failures_restart_until_max_restarts_then_fail(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset(failurePolicy={"maxRestarts": 1}))
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    await sim.fail("js-workers-1")

    async def restarted() -> bool:
        js = await c.get()
        return (js.get("status") or {}).get("restarts") == 1

    await eventually(restarted, "restarted", 45.0)
    restarting = condition(await c.get(), "RestartingJobSet")
    assert restarting is not None
    assert restarting["reason"] == "DefaultFailurePolicy"

    async def recreated_with_attempt_1() -> bool:
        await sim.collect_garbage()
        jobs = [j for j in await sim.jobs() if not _deleting(j)]
        return len(jobs) == 3 and all(j["metadata"]["labels"][RESTART_ATTEMPT] == "1" for j in jobs)

    await eventually(recreated_with_attempt_1, "recreated with attempt 1", 45.0)
    await sim.fail("js-leader-0")

    async def failed() -> bool:
        return ((await c.get()).get("status") or {}).get("terminalState") == "Failed"

    await eventually(failed, "failed", 45.0)
    cond = condition(await c.get(), "Failed")
    assert cond is not None
    assert cond["reason"] == "ReachedMaxRestarts"
    assert cond["message"] == (
        "jobset failed due to reaching max number of restarts (first failed job: js-leader-0)"
    )


async def test_fail_jobset_rule_fails_at_once(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    c = cluster_of(kube, namespace, sim)
    policy = {
        "maxRestarts": 5,
        "rules": [
            {"name": "leaderFails", "action": "FailJobSet", "targetReplicatedJobs": ["leader"]}
        ],
    }
    await c.create(jobset(failurePolicy=policy))
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    await sim.fail("js-leader-0")

    async def failed() -> bool:
        return ((await c.get()).get("status") or {}).get("terminalState") == "Failed"

    await eventually(failed, "failed", 45.0)
    cond = condition(await c.get(), "Failed")
    assert cond is not None
    assert cond["reason"] == "FailJobSetFailurePolicyAction"
    assert (await c.get())["status"]["restarts"] == 0


async def test_blocking_recreate_waits_for_every_old_job_to_go(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim, passes: Passes
) -> None:
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset(failurePolicy={"maxRestarts": 3, "restartStrategy": "BlockingRecreate"}))
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    await sim.fail("js-workers-0")

    async def all_old_jobs_deleting() -> bool:
        jobs = await sim.jobs()
        return len(jobs) == 3 and all(_deleting(j) for j in jobs)

    await eventually(all_old_jobs_deleting, "all old jobs deleting", 45.0)
    # Let one old Job go: with BlockingRecreate nothing may be created while the others remain.
    mark = passes.mark()
    await kube.merge_patch(sim.job_path("js-leader-0"), {"metadata": {"finalizers": None}})
    # The Job's deletion enqueues its JobSet: wait for the pass that saw it gone.
    key = f"{namespace}/js"
    remaining = {"js-workers-0", "js-workers-1"}
    await passes.first(
        key, lambda p: p.job_names() == remaining, "a pass without js-leader-0", since=mark
    )
    planned = [p.plan.names_to_create() for p in passes.since(mark, key)]
    assert all(names == [] for names in planned), planned
    assert [j["metadata"]["name"] for j in await sim.jobs()] == sorted(remaining)
    await sim.collect_garbage()

    async def recreated() -> bool:
        jobs = await sim.jobs()
        return len(jobs) == 3 and all(j["metadata"]["labels"][RESTART_ATTEMPT] == "1" for j in jobs)

    await eventually(recreated, "recreated", 45.0)


async def test_suspend_then_resume_propagates_a_changed_node_selector(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset(suspend=True))
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    assert all(j["spec"]["suspend"] is True for j in await sim.jobs())

    async def suspended() -> bool:
        cond = condition(await c.get(), "Suspended")
        return cond is not None and cond["status"] == "True"

    await eventually(suspended, "suspended", 45.0)
    js = await c.get()
    spec = copy.deepcopy(js["spec"])
    for rjob in spec["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "b"}
    spec["suspend"] = False
    await kube.merge_patch(c.path("js"), {"spec": spec})

    async def resumed() -> bool:
        jobs = await sim.jobs()
        return all(
            j["spec"]["suspend"] is False
            and j["spec"]["template"]["spec"].get("nodeSelector") == {"pool": "b"}
            for j in jobs
        )

    await eventually(resumed, "resumed", 45.0)

    # The pass patches the Jobs before it writes the JobSet's status (WRITE_ORDER), so the
    # status can still be in flight when the Jobs already show the resume: wait for it.
    async def marked_resumed() -> bool:
        cond = condition(await c.get(), "Suspended")
        return cond is not None and (cond["status"], cond["reason"]) == ("False", "ResumeJobs")

    await eventually(marked_resumed, "Suspended=False (ResumeJobs)", 45.0)


async def test_foreign_managed_by_is_left_alone(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim, passes: Passes
) -> None:
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset(managedBy="kueue.x-k8s.io/multikueue"))
    await c.create(jobset("mine"))
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)  # our own JobSet was reconciled
    # The foreign one was looked at too, and the pass planned nothing at all.
    looked = await passes.first(f"{namespace}/js", lambda p: True, "a pass of the foreign JobSet")
    assert looked.plan.is_empty()
    assert all(n.startswith("mine-") for n in await c.job_names())
    assert (await c.get()).get("status") in (None, {})


async def test_ttl_deletes_a_finished_jobset(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset(ttlSecondsAfterFinished=1))
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    for name in await c.job_names():
        await sim.complete(name)

    async def gone() -> bool:
        try:
            js = await c.get()
        except NotFound:
            return True
        if _deleting(js):
            # Foreground deletion waits for the Jobs; play the garbage collector.
            await kube.merge_patch(c.path("js"), {"metadata": {"finalizers": None}})
        return False

    await eventually(gone, "gone", 30)


async def test_a_job_owned_by_another_jobset_uid_is_ignored(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim, passes: Passes
) -> None:
    c = cluster_of(kube, namespace, sim)
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "js-stray",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "js", RESTART_ATTEMPT: "0"},
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": "js",
                    "uid": "00000000-0000-0000-0000-000000000000",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            },
        },
    }
    await kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", foreign)
    await sim.fail("js-stray")
    await c.create(jobset())
    await eventually(lambda: _count(c, 4), "4 Jobs", 45.0)
    # Once the failed stray is in the controller's Job cache, a pass of the JobSet must neither
    # see it nor fail or restart for it. Reconcile the key directly so that the pass surely comes
    # after the stray is cached (passes of its watch events may all have run before).
    assert controller.controller is not None
    jobsets = controller.controller
    key = f"{namespace}/js"
    await eventually(
        lambda: f"{namespace}/js-stray" in jobsets.jobs.store, "the stray Job cached", 45.0
    )
    mark = passes.mark()

    async def looked_with_the_stray_cached() -> bool:
        await jobsets.reconcile(key)  # a pass skipped for a stale cache records nothing: again
        return any(len(p.snapshot.jobs) == 3 for p in passes.since(mark, key))

    await eventually(
        looked_with_the_stray_cached,
        "a pass with the three own Jobs",
        45.0,
        tolerate=(Conflict,),  # a worker's pass wrote first: reconcile again
    )
    for seen in passes.since(mark, key):
        assert "js-stray" not in seen.job_names()
        assert not seen.plan.failed
        assert seen.plan.jobs_to_delete == ()
        assert (seen.plan.status or {}).get("restarts", 0) == 0
    js = await c.get()
    assert condition(js, "Failed") is None
    assert js["status"]["restarts"] == 0
    assert "js-stray" in await c.job_names()


async def test_a_steady_jobset_with_volume_claims_causes_no_writes(
    controller: Manager,
    kube: KubeClient,
    namespace: str,
    sim: KubeSim,
    passes: Passes,
    control_plane: ControlPlane,
    controller_account: tuple[str, Path],
) -> None:
    c = cluster_of(kube, namespace, sim)
    body = jobset(
        volumeClaimPolicies=[
            {
                "templates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ]
            }
        ]
    )
    pod = body["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    await c.create(body)
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    await kube.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data-js")
    for name in await c.job_names():
        await sim.start(name)

    async def ready() -> bool:
        statuses = ((await c.get()).get("status") or {}).get("replicatedJobsStatus") or []
        return sum(int(s["ready"]) for s in statuses) == 3

    await eventually(ready, "ready", 45.0)
    key = f"{namespace}/js"

    async def steady() -> bool:
        # The pass that saw the JobSet as it is now (its own last status write included)
        # planned nothing: no write of that pass is still to come.
        version = (await c.get())["metadata"]["resourceVersion"]
        return any(
            p.snapshot.jobset.metadata.resource_version == version and p.writes_nothing()
            for p in passes.since(0, key)
        )

    await eventually(steady, "a pass of the JobSet as it is that plans no write", 45.0)
    # Every write the controller sends into this namespace, from the API server's audit log (it
    # runs as its own ServiceAccount; other tests' JobSets in terminating namespaces may still
    # be reconciled meanwhile: they are not ours to count).
    assert controller.controller is not None
    user = service_account_user(controller_account[0], CONTROLLER_ACCOUNT)
    before = {event["auditID"] for event in control_plane.audit_events(user)}
    mark = passes.mark()
    for _ in range(5):  # nudge: reconcile the same unchanged state again and again
        await controller.controller.reconcile(key)
    # And a pass driven by a watch event, as the workers run them: a change the controller has
    # nothing to do about (an annotation of ours) enqueues the key.
    await kube.merge_patch(c.path("js"), {"metadata": {"annotations": {"test/nudge": "1"}}})
    await passes.first(
        key,
        lambda p: p.snapshot.jobset.metadata.annotations.get("test/nudge") == "1",
        "a pass that saw the annotation",
        since=mark,
    )
    # Every pass since planned no write (so none of theirs is still in flight), and none was
    # sent (the audit log holds a request before its answer is sent).
    assert [p.plan for p in passes.since(mark, key) if not p.writes_nothing()] == []
    writes = [
        (event["verb"], event["requestURI"])
        for event in control_plane.audit_events(user)
        if event["auditID"] not in before
        and event["verb"] not in ("get", "list", "watch")
        and (event.get("objectRef") or {}).get("namespace") == namespace
    ]
    assert writes == []


async def test_rejected_job_creates_emit_an_event_and_are_retried_with_backoff(
    controller: Manager, kube: KubeClient, namespace: str, sim: KubeSim
) -> None:
    # A quota of zero Jobs makes the apiserver refuse every Job create (we write the quota's
    # status ourselves; no controller-manager runs here). The reconcile fails, is retried with
    # backoff, and the process keeps going; once the quota is gone the Jobs appear.
    quota_path = f"/api/v1/namespaces/{namespace}/resourcequotas"
    zero = {"count/jobs.batch": "0"}
    await kube.create(quota_path, {"metadata": {"name": "jobs"}, "spec": {"hard": zero}})
    await kube.merge_patch(f"{quota_path}/jobs/status", {"status": {"hard": zero, "used": zero}})
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset())

    async def creation_failed_event() -> bool:
        events = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        return any(e.get("reason") == "JobCreationFailed" for e in events.get("items") or ())

    await eventually(creation_failed_event, "creation failed event", 45.0)
    events = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    event = next(e for e in events["items"] if e["reason"] == "JobCreationFailed")
    assert event["type"] == "Warning"
    assert event["regarding"]["name"] == "js"
    assert 'job "js-leader-0" creation failed with error:' in event["note"]
    assert "exceeded quota" in event["note"]
    assert await c.job_names() == []
    errors_before = _errors(controller)
    assert errors_before >= 1
    await kube.request("DELETE", f"{quota_path}/jobs")
    await eventually(lambda: _count(c, 3), "3 Jobs", 30)
    assert controller.controller is not None


def _errors(manager: Manager) -> float:
    value = manager.registry.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "jobset"}
    )
    return float(value or 0.0)


async def test_a_create_refused_in_a_terminating_namespace_is_not_retried(
    controller: Manager,
    kube: KubeClient,
    namespace: str,
    sim: KubeSim,
    passes: Passes,
    control_plane: ControlPlane,
    controller_account: tuple[str, Path],
) -> None:
    """The namespace is deleted (it stays Terminating here: this control plane runs no namespace
    controller) and one of the JobSet's Jobs goes: the pass that wants it back is refused with
    the NamespaceTerminating cause and ends without an error, so no backoff retry follows. A
    later event still gets its own pass, and its create is refused once, too."""
    c = cluster_of(kube, namespace, sim)
    await c.create(jobset())
    await eventually(lambda: _count(c, 3), "3 Jobs", 45.0)
    key, gone = f"{namespace}/js", "js-workers-1"
    user = service_account_user(controller_account[0], CONTROLLER_ACCOUNT)

    def refused_creates() -> list[str]:
        return sorted(
            {
                event["auditID"]
                for event in control_plane.iter_audit_events(user)
                if event["verb"] == "create"
                and (event.get("objectRef") or {}).get("resource") == "jobs"
                and (event.get("objectRef") or {}).get("namespace") == namespace
                and (event.get("responseStatus") or {}).get("code") == 403
            }
        )

    await kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
    mark = passes.mark()
    # Background: a Job deleted with its default (orphan) policy waits for a garbage collector.
    await kube.delete(
        f"/apis/batch/v1/namespaces/{namespace}/jobs/{gone}", propagation="Background"
    )
    first = await passes.first(
        key,
        lambda p: any(j["metadata"]["name"] == gone for j in p.plan.jobs_to_create),
        "a pass that wants the Job back",
        since=mark,
    )
    await eventually(lambda: len(refused_creates()) == 1, "its create refused", 45.0)
    # A change the controller has nothing to do about enqueues the key once more; by the time
    # its pass runs, the refused one has finished (one worker per key).
    await kube.merge_patch(c.path("js"), {"metadata": {"annotations": {"test/nudge": "1"}}})
    nudged = await passes.first(
        key,
        lambda p: p.snapshot.jobset.metadata.annotations.get("test/nudge") == "1",
        "a pass that saw the annotation",
        since=mark,
    )
    await eventually(lambda: len(refused_creates()) == 2, "the nudged pass's create refused", 45.0)
    between = passes.since(mark, key)
    assert between.index(nudged) == between.index(first) + 1, "a retry ran in between"
    assert await c.job_names() == ["js-leader-0", "js-workers-0"]
