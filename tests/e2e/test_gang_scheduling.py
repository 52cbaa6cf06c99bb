"""Gang scheduling (KEP-969, gate JobSetWorkloadAwareSchedulingAPI) against Kubernetes' own
kube-apiserver and kube-scheduler serving scheduling.k8s.io/v1beta1 (Kubernetes >= 1.37 with the
GenericWorkload gate; the scheduler's GangScheduling plugin is on with it). docs/behaviour.md
#gang-scheduling.

Why a cluster of its own: the API and the scheduler plugin are off on the session's cluster (as on
a cluster nobody configured for it), and the test swaps our controller between gate on and gate
off, which no other test's JobSets may see. The cluster starts without nodes; every test gets a
pool of small kwok nodes of its own (2 CPUs each, selected by a label its pods ask for), so the
"does it fit" arithmetic of one test never depends on what another left behind. Pods request 1 CPU
and run until deleted.

Our controller runs as a user runs it (`jobset-controller run`), its JobSet webhooks registered
by URL for each test's namespace only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH
from jobset_controller_dev.envtest.controller import ControllerProcess, start_local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import (
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import container, jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import NodeSpec
from jobset_controller_dev.envtest.polling import eventually
from jobset_controller_dev.envtest.processes import processes_mentioning
from jobset_controller_dev.envtest.webhooks import (
    MUTATING,
    VALIDATING,
    jobset_webhook_configuration,
)

pytestmark = pytest.mark.e2e

GATE = "JobSetWorkloadAwareSchedulingAPI"
SCHEDULING = "/apis/scheduling.k8s.io/v1beta1"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
POOL_LABEL = "gang-e2e.jobset.test/pool"
NODE_CPUS = 2
WITHIN = 60.0  # seconds for anything the scheduler or the controller does on a loaded machine
KEEP = "gang-e2e.jobset.test/keep"  # the test's own finalizer on a PodGroup


@pytest.fixture(scope="module")
def cluster() -> Iterator[FullCluster]:
    full = FullCluster(
        workload_api=True,
        nodes=[],
        keep_workdir=os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1",
    )
    full.start()
    marker = str(full.workdir)
    try:
        yield full
    finally:
        full.stop()
        assert processes_mentioning(marker) == []


class Controllers:
    """Our controller, with the gate on or off: one process at a time (both would reconcile every
    JobSet of the cluster), swapped only when a test asks for the other setting."""

    def __init__(self, cluster: FullCluster) -> None:
        self.cluster = cluster
        self.process: ControllerProcess | None = None
        self.gate: bool | None = None
        self.webhook_port = 0
        self.starts = 0

    def use(self, gate: bool) -> ControllerProcess:
        if self.process is not None and self.gate == gate:
            return self.process
        self.stop()
        self.starts += 1
        stem = f"gang-{'on' if gate else 'off'}-{self.starts}"
        self.process = start_local_controller(
            workdir=self.cluster.workdir,
            ca=self.cluster.ca,
            kubeconfig=self.cluster.kubeconfig,
            stem=stem,
            sections={"featureGates": {GATE: gate}},
        )
        self.gate = gate
        self.webhook_port = self.process.webhook_port
        return self.process

    def stop(self) -> None:
        if self.process is not None:
            process, self.process = self.process, None
            assert process.stop(60) == 0, process.tail()


@pytest.fixture(scope="module")
def controllers(cluster: FullCluster) -> Iterator[Controllers]:
    holder = Controllers(cluster)
    try:
        yield holder
    finally:
        holder.stop()


@dataclass
class Space:
    """A test's namespace, its node pool and the client it talks through."""

    cluster: FullCluster
    kube: KubeClient
    name: str
    pool: str
    nodes: list[str] = field(default_factory=list)
    webhooks: list[tuple[str, str]] = field(default_factory=list)

    # ------------------------------------------------------------------ setup
    def add_nodes(self, count: int) -> list[str]:
        start = len(self.nodes)
        specs = [
            NodeSpec(
                name=f"{self.pool}-{start + i}",
                labels={POOL_LABEL: self.pool},
                cpu=str(NODE_CPUS),
                memory="8Gi",
                gpus=0,
            )
            for i in range(count)
        ]
        names = self.cluster.add_nodes(specs)
        self.nodes += names
        return names

    def register_webhooks(self, port: int) -> None:
        """Our JobSet webhooks (defaulting, validation) for this namespace only, by URL."""
        self.unregister_webhooks()
        base = f"https://127.0.0.1:{port}"
        ca = self.cluster.ca.cert_pem
        for path, name, hook, url, operations in (
            (MUTATING, f"gang-m-{self.name}", "mjobset.kb.io", base + MUTATE_PATH, ["CREATE"]),
            (
                VALIDATING,
                f"gang-v-{self.name}",
                "vjobset.kb.io",
                base + VALIDATE_PATH,
                ["CREATE", "UPDATE"],
            ),
        ):
            body = jobset_webhook_configuration(name, hook, url, ca, self.name, operations)
            status, reply = self.cluster.request("POST", path, body)
            assert status == 201, reply
            self.webhooks.append((path, name))

    def unregister_webhooks(self) -> None:
        for path, name in self.webhooks:
            self.cluster.request("DELETE", f"{path}/{name}")
        self.webhooks.clear()

    # ------------------------------------------------------------------ JobSets
    def jobset(self, name: str, *jobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
        return jobset_manifest(name, replicated_jobs=jobs, **spec)

    def rjob(self, name: str, replicas: int, pods: int, **fields: Any) -> dict[str, Any]:
        """Jobs of ``pods`` pods each, 1 CPU a pod, on this test's pool, running until deleted."""
        return replicated_job(
            name,
            replicas,
            pods=pods,
            backoff_limit=0,
            annotations={RUN_FOREVER_ANNOTATION: "true"},
            containers=[container(resources={"requests": {"cpu": "1"}})],
            pod_spec={"nodeSelector": {POOL_LABEL: self.pool}},
            **fields,
        )

    def jobsets_path(self, name: str = "") -> str:
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.name}/jobsets"
        return f"{path}/{name}" if name else path

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.kube.create(self.jobsets_path(), body)

    async def set_suspend(self, name: str, suspend: bool) -> None:
        await self.kube.merge_patch(self.jobsets_path(name), {"spec": {"suspend": suspend}})

    # ------------------------------------------------------------------ reading
    async def pods(self, jobset: str) -> list[dict[str, Any]]:
        reply = await self.kube.get(
            f"/api/v1/namespaces/{self.name}/pods", labelSelector=f"{JOBSET_NAME}={jobset}"
        )
        return [
            pod for pod in reply.get("items") or () if not pod["metadata"].get("deletionTimestamp")
        ]

    async def bound(self, jobset: str) -> tuple[int, int]:
        """(pods with a node, pods) of the JobSet now."""
        pods = await self.pods(jobset)
        return sum(1 for pod in pods if pod["spec"].get("nodeName")), len(pods)

    async def scheduling_objects(self, plural: str) -> list[dict[str, Any]]:
        reply = await self.kube.get(f"{SCHEDULING}/namespaces/{self.name}/{plural}")
        return list(reply.get("items") or ())

    async def events(self, jobset: str, reason: str) -> list[dict[str, Any]]:
        reply = await self.kube.get(f"/apis/events.k8s.io/v1/namespaces/{self.name}/events")
        return [
            event
            for event in reply.get("items") or ()
            if event.get("reason") == reason
            and (event.get("regarding") or {}).get("name") == jobset
            and (event.get("regarding") or {}).get("kind") == "JobSet"
        ]

    async def wait_all_bound(self, jobset: str, count: int, what: str = "") -> list[dict[str, Any]]:
        async def done() -> bool:
            return await self.bound(jobset) == (count, count)

        await eventually(done, what or f"all {count} pods of {jobset} bound", WITHIN)
        return await self.pods(jobset)


@pytest.fixture
def space(cluster: FullCluster, kube: KubeClient) -> Iterator[Space]:
    suffix = uuid.uuid4().hex[:6]
    name = cluster.create_namespace(f"gang-{suffix}")
    result = Space(cluster, kube, name, pool=f"gang-{suffix}")
    try:
        yield result
    finally:
        result.unregister_webhooks()
        cluster.delete_namespace(name)
        cluster.delete_nodes(result.nodes)


@pytest.fixture
def gated(controllers: Controllers, space: Space) -> Space:
    """The space, reconciled by our controller with the gate on and admitted by its webhooks."""
    controllers.use(True)
    space.register_webhooks(controllers.webhook_port)
    return space


def digest(kind: str, namespace: str, identity: str) -> str:
    """KEP-969's name hash, spelled out here to pin it: SHA-1 of <kind>/<namespace>/<identity>."""
    text = f"{kind}/{namespace}/{identity}".encode()
    return hashlib.sha1(text, usedforsecurity=False).hexdigest()[:10]


def owned_by(obj: dict[str, Any], jobset: dict[str, Any]) -> bool:
    (owner,) = obj["metadata"]["ownerReferences"]
    return bool(
        owner["kind"] == "JobSet"
        and owner["name"] == jobset["metadata"]["name"]
        and owner["uid"] == jobset["metadata"]["uid"]
        and owner.get("controller") is True
    )


def scheduled(group: dict[str, Any]) -> str | None:
    """The status of the scheduler's PodGroupInitiallyScheduled condition on the PodGroup."""
    found = condition(group, "PodGroupInitiallyScheduled")
    return None if found is None else str(found["status"])


def names(objs: list[dict[str, Any]]) -> list[str]:
    return [str(obj["metadata"]["name"]) for obj in objs]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for entry in (obj.get("status") or {}).get("conditions") or ():
        if entry.get("type") == kind:
            return dict(entry)
    return None


# ---------------------------------------------------------------------------------------- tests


async def test_a_gang_that_fits_is_bound_at_once_through_the_keps_workload_and_pod_group(
    gated: Space,
) -> None:
    space = gated
    space.add_nodes(2)  # 4 CPUs: the 4 pods fit exactly
    created = await space.create(
        space.jobset("fit", space.rjob("w", 2, 2), scheduling={"schedulingPolicy": {"gang": {}}})
    )
    pods = await space.wait_all_bound("fit", 4)

    name = f"fit-{digest('JobSet', space.name, 'fit')}"
    (workload,) = await space.scheduling_objects("workloads")
    (group,) = await space.scheduling_objects("podgroups")
    assert workload["metadata"]["name"] == name
    assert group["metadata"]["name"] == name  # the top-level PodGroup shares the Workload's name
    assert owned_by(workload, created)
    assert owned_by(group, created)
    assert workload["spec"]["controllerRef"] == {
        "apiGroup": "jobset.x-k8s.io",
        "kind": "JobSet",
        "name": "fit",
    }
    # 1.37.2 writes `schedulingConstraints: null` into every template (the v1beta1 field has no
    # omitempty): only the fields set count.
    templates = [
        {key: value for key, value in template.items() if value is not None}
        for template in workload["spec"]["podGroupTemplates"]
    ]
    assert templates == [{"name": "fit", "schedulingPolicy": {"gang": {"minCount": 4}}}]
    assert group["spec"]["workloadRef"] == {"workloadName": name, "templateName": "fit"}
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {name}
    # The scheduler placed them as one gang and says so on the PodGroup.
    assert scheduled(group) == "True", group.get("status")
    assert await space.events("fit", "PodGroupUnschedulable") == []


async def test_a_gang_one_pod_too_big_binds_no_pod_and_says_why_until_a_node_is_added(
    gated: Space,
) -> None:
    space = gated
    space.add_nodes(2)  # 4 CPUs for 5 pods
    await space.create(space.jobset("big", space.rjob("w", 1, 5), scheduling={}))
    name = f"big-{digest('JobSet', space.name, 'big')}"

    async def verdict() -> dict[str, Any] | None:
        groups = await space.scheduling_objects("podgroups")
        return condition(groups[0], "PodGroupInitiallyScheduled") if groups else None

    async def notes() -> set[str]:
        return {event["note"] for event in await space.events("big", "PodGroupUnschedulable")}

    async def reported() -> bool:
        # The scheduler may retry and reword between two reads: the event for the current words.
        current = await verdict()
        return current is not None and (
            f"PodGroup {name} cannot be scheduled: {current['message']}" in await notes()
        )

    await eventually(reported, "the scheduler's verdict as an event on the JobSet", WITHIN)
    current = await verdict()
    assert current is not None
    assert (current["status"], current["reason"]) == ("False", "Unschedulable")
    assert all(note.startswith(f"PodGroup {name} cannot be scheduled: ") for note in await notes())
    print(f"unschedulable gang: {current['message']}")
    assert await space.bound("big") == (0, 5)  # all or nothing: nothing

    space.add_nodes(1)  # now 6 CPUs
    await space.wait_all_bound("big", 5, "the whole gang binds once a node is added")
    (group,) = await space.scheduling_objects("podgroups")
    assert scheduled(group) == "True", group.get("status")


async def test_two_gangs_that_cannot_both_fit_are_never_half_placed_and_one_runs(
    gated: Space,
) -> None:
    """4 CPUs, two gangs of 3: without gangs each could get 2 pods and neither ever run.

    Binding is one API call per pod, after the gang's scheduling cycle placed them all, so a read
    may land between two of a gang's bindings: a partial count is allowed on the winner's way to
    the whole gang, never as a state, and the loser holds no node at any reading (pod by pod, it
    would take the CPU the winner leaves free, or both would hold two and neither run).

    How long the bindings take is not asserted: kube-scheduler binds a gang's pods one API call
    at a time, and on a loaded machine they landed about a second apart (measured with
    `hack/flaky.sh` at load 8); a bound on it would judge the machine, not the gang."""
    space = gated
    space.add_nodes(2)
    gangs = ("red", "blue")
    await asyncio.gather(
        *(space.create(space.jobset(js, space.rjob("w", 1, 3), scheduling={})) for js in gangs)
    )
    history: dict[str, list[tuple[float, int]]] = {js: [] for js in gangs}

    async def settled() -> bool:
        counts = {js: await space.bound(js) for js in gangs}
        for js, (bound, _) in counts.items():
            history[js].append((time.monotonic(), bound))
        complete = [js for js, (bound, total) in counts.items() if bound == total == 3]
        empty = [js for js, (bound, total) in counts.items() if bound == 0 and total == 3]
        if len(complete) != 1 or len(empty) != 1:
            return False
        # The loser must have been judged by the scheduler, not merely not reached yet.
        loser = empty[0]
        return bool(await space.events(loser, "PodGroupUnschedulable"))

    await eventually(settled, "one gang bound whole, the other reported unschedulable", WITHIN)
    winner = next(js for js in gangs if history[js][-1][1] == 3)
    loser = next(js for js in gangs if js != winner)
    assert {bound for _, bound in history[loser]} == {0}, history  # the loser never held a node
    climb = [bound for _, bound in history[winner]]
    assert climb == sorted(climb), history  # never lost a pod on the way
    partial = [bound for bound in climb if 0 < bound < 3]
    print(f"gang race: {winner} won; reads {len(climb)}, partial reads {len(partial)}")


async def test_two_gangs_under_contention_run_one_after_the_other_never_half_placed(
    gated: Space,
) -> None:
    """What gangs are for: two JobSets that each fit alone but not together (4 CPUs, two gangs
    of 3 one-CPU pods). Pod by pod, both could hold nodes and neither have all its pods; as
    gangs, one runs whole while the other holds no node, then the other runs whole once the
    first's pods have ended, and both complete.

    The pods run until the test lets them finish (the workload's end, played by the test): the
    loser is seen waiting, judged unschedulable by the scheduler, before the winner may end, so
    the contention is certain, not raced for. Every reading is one list of the namespace's pods
    (one resourceVersion), so the two JobSets are compared in one consistent state. As in the
    test above, a partial count is allowed only on its way to the whole gang (the binding calls
    of one gang cycle), never as a state: every count only climbs, and the loser holds no node
    until every pod of the winner has ended."""
    space = gated
    space.add_nodes(2)  # 4 CPUs: one gang of 3 fits, two do not
    gangs = ("red", "blue")
    await asyncio.gather(
        *(space.create(space.jobset(js, space.rjob("w", 1, 3), scheduling={})) for js in gangs)
    )
    history: list[tuple[float, dict[str, Reading]]] = []

    async def read() -> dict[str, Reading]:
        listed = await space.kube.get(f"/api/v1/namespaces/{space.name}/pods")
        now = {js: Reading() for js in gangs}
        for pod in listed.get("items") or ():
            reading = now[pod["metadata"]["labels"][JOBSET_NAME]]
            reading.pods += 1
            reading.bound += bool(pod["spec"].get("nodeName"))
            reading.ended += pod["status"].get("phase") in ("Succeeded", "Failed")
        history.append((time.monotonic(), now))
        return now

    async def one_waits() -> bool:
        now = await read()
        whole = [js for js in gangs if now[js].bound == now[js].pods == 3]
        waiting = [js for js in gangs if now[js].bound == 0 and now[js].pods == 3]
        if len(whole) != 1 or len(waiting) != 1:
            return False
        return bool(await space.events(waiting[0], "PodGroupUnschedulable"))

    await eventually(one_waits, "one gang bound whole, the other waiting unschedulable", WITHIN)
    last = history[-1][1]
    winner = next(js for js in gangs if last[js].bound == 3)
    loser = next(js for js in gangs if js != winner)

    await finish_pods(space, winner)

    async def loser_whole() -> bool:
        return (await read())[loser].bound == 3

    await eventually(loser_whole, f"{loser} bound whole once {winner}'s pods ended", WITHIN)
    await finish_pods(space, loser)

    async def both_completed() -> bool:
        await read()
        for js in gangs:
            status = (await space.kube.get(space.jobsets_path(js))).get("status") or {}
            if not any(
                c["type"] == "Completed" and c["status"] == "True"
                for c in status.get("conditions") or ()
            ):
                return False
        return True

    await eventually(both_completed, "both JobSets Completed", WITHIN)

    # Never half-placed: a count between 0 and 3 only on its way to 3 (it only climbs, and the
    # waits above saw each gang whole); and never both at once: the loser held a node only once
    # every pod of the winner had ended.
    seen = timeline(history)
    for js in gangs:
        climb = [now[js].bound for _, now in history]
        assert climb == sorted(climb), (js, seen)  # no pod ever lost its node
    overlap = [at for at, now in history if now[loser].bound and now[winner].ended < 3]
    assert overlap == [], (overlap, seen)
    print(f"gang contention: {winner} ran first, {loser} after it; {seen}")


def timeline(history: list[tuple[float, dict[str, Reading]]]) -> str:
    """The readings where a count changed, in seconds from the first: short enough to survive
    pytest's shortening of a failure's message."""
    start = history[0][0]
    lines: list[str] = []
    last: str | None = None
    for at, now in history:
        state = ", ".join(f"{js} {r.bound}/{r.pods} ended {r.ended}" for js, r in now.items())
        if state != last:
            lines.append(f"+{at - start:.2f}s {state}")
            last = state
    return f"{len(history)} readings: " + "; ".join(lines)


@dataclass
class Reading:
    """One JobSet's pods in one list of the namespace."""

    pods: int = 0
    bound: int = 0
    ended: int = 0


async def finish_pods(space: Space, jobset: str) -> None:
    """Let the JobSet's pods end: their run-forever annotation taken off, kwok ends each
    Succeeded a moment later (the workload finishing, played by the test)."""
    patch = {
        "metadata": {
            "annotations": {RUN_FOREVER_ANNOTATION: None, RUN_DURATION_ANNOTATION: "100ms"}
        }
    }
    for pod in await space.pods(jobset):
        path = f"/api/v1/namespaces/{space.name}/pods/{pod['metadata']['name']}"
        await space.kube.merge_patch(path, patch)


async def test_per_replicated_job_gangs_with_depends_on_start_in_order_without_deadlock(
    gated: Space,
) -> None:
    """One JobSet-wide gang could never fill while the workers wait for the leader to be Ready:
    a sequenced JobSet gets one gang per ReplicatedJob, exactly the 5 CPUs the pool has."""
    space = gated
    space.add_nodes(3)  # 6 CPUs; the pods need 5
    leader = space.rjob("leader", 1, 1)
    workers = space.rjob("workers", 2, 2, dependsOn=[{"name": "leader", "status": "Ready"}])
    await space.create(space.jobset("seq", leader, workers, scheduling={}))
    pods = await space.wait_all_bound("seq", 5, "the leader's and then the workers' gangs bind")

    groups = {
        g["spec"]["workloadRef"]["templateName"]: g
        for g in await space.scheduling_objects("podgroups")
    }
    assert set(groups) == {"leader", "workers"}
    assert groups["leader"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    assert groups["workers"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    for template, group in groups.items():
        assert group["metadata"]["name"] == (
            f"seq-{template}-{digest('ReplicatedJob', space.name, f'seq/{template}')}"
        )
        assert scheduled(group) == "True", group.get("status")
    by_rjob: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        rjob = pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
        by_rjob.setdefault(rjob, []).append(pod)
        assert pod["spec"]["schedulingGroup"]["podGroupName"] == (groups[rjob]["metadata"]["name"])
    # In order: no worker pod existed before the leader's pod was Ready.
    (leader_pod,) = by_rjob["leader"]
    ready = condition(leader_pod, "Ready")
    assert ready is not None
    assert ready["status"] == "True"
    assert all(
        pod["metadata"]["creationTimestamp"] >= ready["lastTransitionTime"]
        for pod in by_rjob["workers"]
    )


async def test_suspend_deletes_the_workload_and_pod_groups_and_resume_binds_the_gang_again(
    gated: Space,
) -> None:
    space = gated
    space.add_nodes(2)
    await space.create(space.jobset("sus", space.rjob("w", 1, 3), scheduling={}))
    await space.wait_all_bound("sus", 3)
    (workload,) = await space.scheduling_objects("workloads")
    (group,) = await space.scheduling_objects("podgroups")

    await space.set_suspend("sus", True)

    left: dict[str, list[str]] = {}

    async def gone() -> bool:
        left["workloads"] = names(await space.scheduling_objects("workloads"))
        left["podgroups"] = names(await space.scheduling_objects("podgroups"))
        left["pods"] = names(await space.pods("sus"))
        return not any(left.values())

    try:
        await eventually(gone, "Workload, PodGroup and pods deleted on suspend", WITHIN)
    except AssertionError as error:
        raise AssertionError(f"{error}; still there: {left}") from None

    await space.set_suspend("sus", False)
    await space.wait_all_bound("sus", 3, "the gang binds again after resume")
    (again,) = await space.scheduling_objects("workloads")
    (group_again,) = await space.scheduling_objects("podgroups")
    assert again["metadata"]["name"] == workload["metadata"]["name"]
    assert group_again["metadata"]["name"] == group["metadata"]["name"]
    assert again["metadata"]["uid"] != workload["metadata"]["uid"]  # recreated, not kept
    assert group_again["metadata"]["uid"] != group["metadata"]["uid"]


async def test_a_resume_while_the_old_pod_group_is_still_terminating_binds_the_gang(
    gated: Space,
) -> None:
    """The API server puts the podgroup-protection finalizer on every PodGroup: a suspended
    JobSet's PodGroup stays Terminating until no active pod names it. A resume in that window
    (Kueue readmitting a preempted JobSet does this) finds the name taken; pods created then
    would name the old object and keep it Terminating while they run. The controller holds the
    resume until the old PodGroup is gone, says so once the wait is long, and the new pods name a
    new PodGroup.

    The window is made certain, not raced for: a finalizer of the test's own keeps the old
    PodGroup Terminating until the test lets it go (its pods would free it in a moment)."""
    space = gated
    space.add_nodes(2)
    await space.create(space.jobset("quick", space.rjob("w", 1, 3), scheduling={}))
    first = {pod["metadata"]["uid"] for pod in await space.wait_all_bound("quick", 3)}
    (old,) = await space.scheduling_objects("podgroups")
    name = old["metadata"]["name"]
    path = f"{SCHEDULING}/namespaces/{space.name}/podgroups/{name}"
    finalizers = list(old["metadata"].get("finalizers") or ())
    await space.kube.merge_patch(path, {"metadata": {"finalizers": [*finalizers, KEEP]}})
    await space.set_suspend("quick", True)

    async def terminating() -> bool:
        group = await space.kube.get(path)
        being_deleted = bool(group["metadata"].get("deletionTimestamp"))
        return being_deleted and await space.pods("quick") == []  # the old pods Terminating

    await eventually(terminating, "the PodGroup's and the pods' deletion begun", WITHIN)
    await space.set_suspend("quick", False)

    async def said() -> bool:
        return bool(await space.events("quick", "ResumeWaitsForPodGroup"))

    # The event comes a minute after the PodGroup's deletion began: the hold's own evidence.
    await eventually(said, "the held resume said on the JobSet", WITHIN + 60)
    (event,) = await space.events("quick", "ResumeWaitsForPodGroup")
    assert event["type"] == "Warning"
    assert f"PodGroup {name} (Terminating since " in event["note"], event["note"]
    jobs = (await space.kube.get(f"/apis/batch/v1/namespaces/{space.name}/jobs"))["items"]
    assert [job["spec"]["suspend"] for job in jobs] == [True]  # held: not resumed
    assert await space.pods("quick") == []

    group = await space.kube.get(path)
    kept = [f for f in group["metadata"].get("finalizers") or () if f != KEEP]
    await space.kube.merge_patch(path, {"metadata": {"finalizers": kept}})

    async def rebound() -> bool:
        pods = await space.pods("quick")
        fresh = [pod for pod in pods if pod["metadata"]["uid"] not in first]
        return len(fresh) == 3 and all(pod["spec"].get("nodeName") for pod in fresh)

    await eventually(rebound, "the gang binds again, with new pods", WITHIN)
    pods = await space.pods("quick")
    assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {name}
    (new,) = await space.scheduling_objects("podgroups")  # the old one is gone
    assert new["metadata"]["name"] == name
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert not new["metadata"].get("deletionTimestamp")
    assert scheduled(new) == "True", new.get("status")


async def test_a_regrouping_while_suspended_recreates_the_jobs_and_the_pods_bind_after_resume(
    gated: Space,
) -> None:
    """spec.scheduling may change while suspended; a suspended Job's pod template cannot change
    its schedulingGroup, so the resume recreates the Jobs linked to the PodGroups the new spec
    names (resumed as they were, their pods would wait for the old PodGroup for ever)."""
    space = gated
    space.add_nodes(2)
    leader, workers = space.rjob("leader", 1, 1), space.rjob("workers", 1, 2)
    await space.create(space.jobset("regroup", leader, workers, scheduling={}))
    await space.wait_all_bound("regroup", 3)
    (old,) = await space.scheduling_objects("podgroups")
    jobs_path = f"/apis/batch/v1/namespaces/{space.name}/jobs"
    old_jobs = {job["metadata"]["uid"] for job in (await space.kube.get(jobs_path))["items"]}
    await space.set_suspend("regroup", True)

    async def gone() -> bool:
        return not await space.scheduling_objects("podgroups") and not await space.pods("regroup")

    await eventually(gone, "the PodGroup and the pods deleted on suspend", WITHIN)
    per_rjob = {
        "replicatedJobs": [{"targetReplicatedJobs": [rjob]} for rjob in ("leader", "workers")]
    }
    await space.kube.merge_patch(space.jobsets_path("regroup"), {"spec": {"scheduling": per_rjob}})
    await space.set_suspend("regroup", False)

    pods = await space.wait_all_bound("regroup", 3, "the regrouped gangs bind after resume")
    groups = {
        g["spec"]["workloadRef"]["templateName"]: g["metadata"]["name"]
        for g in await space.scheduling_objects("podgroups")
    }
    assert set(groups) == {"leader", "workers"}
    assert old["metadata"]["name"] not in groups.values()
    for pod in pods:
        rjob = pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
        assert pod["spec"]["schedulingGroup"]["podGroupName"] == groups[rjob]
    jobs = (await space.kube.get(jobs_path))["items"]
    assert len(jobs) == 2
    assert not old_jobs & {job["metadata"]["uid"] for job in jobs}  # recreated, not resumed


async def test_jobs_created_suspended_carry_the_link_and_bind_as_a_gang_once_resumed(
    gated: Space,
) -> None:
    """Kueue's path without Kueue: the Jobs exist, suspended, before any PodGroup does. A suspended
    Job's pod template cannot gain schedulingGroup later, so they must be created linked."""
    space = gated
    space.add_nodes(2)
    await space.create(space.jobset("late", space.rjob("w", 1, 3), scheduling={}, suspend=True))
    name = f"late-{digest('JobSet', space.name, 'late')}"
    path = f"/apis/batch/v1/namespaces/{space.name}/jobs"

    async def created() -> bool:
        return bool((await space.kube.get(path)).get("items"))

    await eventually(created, "the suspended Job created", WITHIN)
    (job,) = (await space.kube.get(path))["items"]
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": name}
    assert await space.scheduling_objects("podgroups") == []  # none while suspended

    await space.set_suspend("late", False)
    pods = await space.wait_all_bound("late", 3, "the resumed gang binds")
    assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {name}
    (group,) = await space.scheduling_objects("podgroups")
    assert scheduled(group) == "True", group.get("status")


@contextlib.asynccontextmanager
async def added_watch(kube: KubeClient, path: str) -> AsyncIterator[list[dict[str, Any]]]:
    """Every object ADDED under ``path`` from now on (a watch from the current list's version:
    what it sees is everything created since, even if deleted again before we look)."""
    listing = await kube.get(path)
    version = listing["metadata"]["resourceVersion"]
    added: list[dict[str, Any]] = [*(listing.get("items") or ())]

    async def follow() -> None:
        params = {"resourceVersion": version, "allowWatchBookmarks": "false"}
        async for event in kube.watch(path, params=params, read_timeout=3600):
            if event.get("type") == "ADDED":
                added.append(event["object"])

    task = asyncio.create_task(follow())
    try:
        yield added
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ApiError):
            await task


async def test_gate_off_refuses_scheduling_at_admission_and_a_jobset_that_got_in_runs_unganged(
    controllers: Controllers, space: Space, kube: KubeClient
) -> None:
    controllers.use(False)
    space.register_webhooks(controllers.webhook_port)
    space.add_nodes(2)
    body = space.jobset("off", space.rjob("w", 1, 3), scheduling={})
    with pytest.raises(ApiError) as refused:
        await space.create(body)
    assert "JobSetWorkloadAwareSchedulingAPI" in str(refused.value), refused.value

    # One that reached the controller anyway (admitted while the webhooks were not called).
    space.unregister_webhooks()
    base = f"{SCHEDULING}/namespaces/{space.name}"
    async with (
        added_watch(kube, f"{base}/workloads") as workloads,
        added_watch(kube, f"{base}/podgroups") as pod_groups,
    ):
        await space.create(body)
        pods = await space.wait_all_bound("off", 3, "the pods schedule without a gang")

        async def running() -> bool:
            phases = {pod["status"].get("phase") for pod in await space.pods("off")}
            return phases == {"Running"}

        await eventually(running, "the pods run", WITHIN)
        # The controller has seen the JobSet through: its status counts the active Job.
        js = await kube.get(space.jobsets_path("off"))
        assert (js.get("status") or {}).get("replicatedJobsStatus"), js.get("status")
    assert workloads == []
    assert pod_groups == []
    assert all("schedulingGroup" not in pod["spec"] for pod in pods)
    conditions = (js.get("status") or {}).get("conditions") or []
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in conditions)
