"""The shipped roles are exactly what the controller uses: proven with the API server's audit log.

`jobset-controller run` (leader election, admission webhooks and internal certificate management
on, as installed) runs as a ServiceAccount bound only to manifests/rbac/role.yaml, and is taken
through every path that makes an API call: its webhook Secret created and its CA injected into the
webhook configurations (upstream's names, by URL on 127.0.0.1, created here without a caBundle);
create, restart, completion and TTL deletion with volumeClaimPolicies admitted by its own webhook;
suspend and resume with a changed template; Job creates refused by a quota (a repeated event); a
scrape of the secure /metrics by a ServiceAccount bound to the shipped metrics-reader role; the
webhook Secret emptied by someone, so it is rewritten and the new CA injected. Then the audit log
must show no request the roles refused, and every verb of every grant used at least once: a grant
nothing used is a failure (remove it from controller/permissions.py, or add the path that uses it
here).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import pytest
import yaml

from jobset_controller.api import JOB_KEY
from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_GATE, PLACEMENT_LABEL
from jobset_controller.controller.permissions import CLUSTER_GRANTS, NAMESPACE_GRANTS
from jobset_controller.controller.webhookcerts import (
    MUTATING_WEBHOOK_CONFIGURATION,
    VALIDATING_WEBHOOK_CONFIGURATION,
)
from jobset_controller.runtime.client import Conflict, KubeClient, NotFound
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.identities import service_account_user, shipped_rbac
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import eventually
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.webhooks import (
    MUTATING,
    VALIDATING,
    jobset_webhook_configuration,
)

ACCOUNT = "controller-manager"
SECRET = "jobset-webhook-server-cert"
_RBAC = "/apis/rbac.authorization.k8s.io/v1"


class Running(NamedTuple):
    """The controller under test: its audit username, its secure /metrics as a reader, and its
    namespace (where its webhook Secret lives)."""

    user: str
    metrics_url: str
    reader_token: str
    home: str


def _jobset(name: str, **spec: Any) -> dict[str, Any]:
    mounts = [{"name": "data", "mountPath": "/data"}] if "volumeClaimPolicies" in spec else None
    workers = replicated_job("workers", 2, backoff_limit=0, volume_mounts=mounts)
    return jobset_manifest(name, replicated_jobs=[workers], **spec)


class Workload:
    """JobSets in one namespace, with Job status written by the test (KubeSim)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.sim = KubeSim(kube, namespace)

    def path(self, name: str = "") -> str:
        base = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{self.namespace}/jobsets"
        return f"{base}/{name}" if name else base

    async def live_jobs(self, jobset: str) -> list[dict[str, Any]]:
        return [
            job
            for job in await self.sim.jobs()
            if job["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == jobset
            and not job["metadata"].get("deletionTimestamp")
        ]

    async def has_jobs(self, jobset: str, count: int, attempt: str | None = None) -> bool:
        await self.sim.collect_garbage()
        jobs = await self.live_jobs(jobset)
        return len(jobs) == count and all(
            attempt is None
            or j["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == attempt
            for j in jobs
        )

    async def gone(self, jobset: str) -> bool:
        await self.sim.collect_garbage()
        try:
            js = await self.kube.get(self.path(jobset))
        except NotFound:
            return True
        if js["metadata"].get("deletionTimestamp"):
            # Foreground deletion waits for the Jobs; play the garbage collector.
            await self.kube.merge_patch(self.path(jobset), {"metadata": {"finalizers": None}})
        return False


@pytest.fixture
async def controller_as_service_account(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Running]:
    """`run` as the shipped ServiceAccount in its own namespace, and a ServiceAccount bound to
    the shipped metrics-reader role to scrape it."""
    home = f"jobset-system-{uuid.uuid4().hex[:6]}"
    certs = tmp_path / "certs"  # empty: the controller writes its own certificate here
    port = free_port()
    config = tmp_path / "config.yaml"
    write_configuration(
        config,
        {
            "leaderElection": {"leaderElect": True, "resourceNamespace": home},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
        },
    )
    base = f"https://127.0.0.1:{port}"
    mutating = jobset_webhook_configuration(
        MUTATING_WEBHOOK_CONFIGURATION, "mjobset.kb.io", base + MUTATE_PATH, b"", namespace,
        ["CREATE"],
    )  # fmt: skip
    validating = jobset_webhook_configuration(
        VALIDATING_WEBHOOK_CONFIGURATION, "vjobset.kb.io", base + VALIDATE_PATH, b"", namespace,
        ["CREATE", "UPDATE"],
    )  # fmt: skip
    for configuration in (mutating, validating):  # the controller injects its own CA
        del configuration["webhooks"][0]["clientConfig"]["caBundle"]
    metrics_port = free_port()
    with shipped_rbac(control_plane, home, [ACCOUNT], tmp_path) as kubeconfigs:
        reader = control_plane.service_account_kubeconfig(home, "reader", tmp_path / "r.kube")
        token = yaml.safe_load(reader.read_text())["users"][0]["user"]["token"]
        reading = f"{_RBAC}/clusterrolebindings/{home}-metrics-reading"
        await kube.create(
            f"{_RBAC}/clusterrolebindings",
            {
                "metadata": {"name": f"{home}-metrics-reading"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"{home}-metrics-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": home}],
            },
        )
        proc = ControllerProcess(
            kubeconfig=kubeconfigs[ACCOUNT],
            config=config,
            log=tmp_path / "controller.log",
            metrics=f"127.0.0.1:{metrics_port}",
            # The API server calls the webhook by URL on this host (no pod network here).
            args=["--webhook-cert-extra-sans=127.0.0.1", "--log-format=json"],
        )
        await kube.create(MUTATING, mutating)
        await kube.create(VALIDATING, validating)
        try:
            yield Running(
                service_account_user(home, ACCOUNT),
                f"https://127.0.0.1:{metrics_port}/metrics",
                token,
                home,
            )
        finally:
            await kube.request("DELETE", reading)
            await kube.request("DELETE", f"{MUTATING}/{mutating['metadata']['name']}")
            await kube.request("DELETE", f"{VALIDATING}/{validating['metadata']['name']}")
            assert proc.stop(30) == 0, proc.tail()
            control_plane.delete_namespace(home)


async def _exercise_pod_placement(kube: KubeClient, namespace: str) -> None:
    """Exclusive placement's pod controller (its pod and node caches and the dry-run mode probe
    run from the start): a leader bound to a node, a gated follower it releases (pods patch), a
    misplaced follower it evicts (pods/status patch, pods delete). Pods made by hand: this
    control plane has no scheduler or Job controller."""
    sa = {"metadata": {"name": "default"}}
    with contextlib.suppress(Conflict):
        await kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)
    node = f"placement-{namespace}"
    await kube.create("/api/v1/nodes", {"metadata": {"name": node, "labels": {"rack": "a"}}})

    def pod(index: int, **spec: Any) -> dict[str, Any]:
        names = {
            "jobset.sigs.k8s.io/jobset-name": "placed",
            "jobset.sigs.k8s.io/replicatedjob-name": "w",
            "jobset.sigs.k8s.io/job-index": "0",
        }
        return {
            "metadata": {
                "name": f"placed-w-0-{index}-x",
                "labels": {**names, JOB_KEY: "k", PLACEMENT_LABEL: LEADER_FOLLOWER},
                "annotations": {
                    **names,
                    "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
                    "batch.kubernetes.io/job-completion-index": str(index),
                },
                "ownerReferences": [
                    {"apiVersion": "batch/v1", "kind": "Job", "name": "placed-w-0",
                     "uid": "00000000-0000-0000-0000-000000000001", "controller": True}
                ],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
        }  # fmt: skip

    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        await kube.create(pods, pod(0, nodeName=node))
        await kube.create(pods, pod(1, schedulingGates=[{"name": PLACEMENT_GATE}]))
        await kube.create(pods, pod(2, nodeSelector={"rack": "b"}))

        async def placed() -> bool:
            follower = await kube.get(f"{pods}/placed-w-0-1-x")
            try:
                await kube.get(f"{pods}/placed-w-0-2-x")
            except NotFound:
                return not follower["spec"].get("schedulingGates")
            return False

        await eventually(
            placed, "gated follower released, misplaced follower evicted", 30, interval=0.2
        )
    finally:
        await kube.request("DELETE", f"/api/v1/nodes/{node}")


async def _exercise_stuck_pod(kube: KubeClient, namespace: str) -> None:
    """A JobSet pod deleted on a node tainted unreachable never ends here (no kubelet): the
    pod controller marks it Failed (pods/status patch) and deletes it without grace (pods
    delete) once it is past twice its grace period (docs/behaviour.md#pods-on-unreachable-nodes).
    No grant is added for it: the eviction above uses the same verbs."""
    node = f"dead-{namespace}"
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
    await kube.create("/api/v1/nodes", {"metadata": {"name": node}, "spec": {"taints": [taint]}})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    stuck = {
        "metadata": {
            "name": "stuck-w-0-0-x",
            "labels": {JOB_KEY: "k", "jobset.sigs.k8s.io/jobset-name": "stuck"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "stuck-w-0",
                 "uid": "00000000-0000-0000-0000-000000000002", "controller": True}
            ],
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }  # fmt: skip
    try:
        await kube.create(pods, stuck)
        await kube.request("DELETE", f"{pods}/stuck-w-0-0-x")

        async def gone() -> bool:
            try:
                await kube.get(f"{pods}/stuck-w-0-0-x")
            except NotFound:
                return True
            return False

        await eventually(gone, "pod on the dead node force-deleted", 30, interval=0.2)
    finally:
        await kube.request("DELETE", f"/api/v1/nodes/{node}")


def _used(events: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    used = set()
    for event in events:
        ref = event.get("objectRef") or {}
        if "resource" not in ref:
            continue  # non-resource URLs (/api, /version discovery)
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        used.add((ref.get("apiGroup", ""), resource, event["verb"]))
    return used


async def test_the_controller_uses_every_shipped_grant_and_nothing_more(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    controller_as_service_account: Running,
) -> None:
    running = controller_as_service_account
    user = running.user
    work = Workload(kube, namespace)
    # The webhook answers only once the controller listens: retry the first create until then.
    claims = {
        "volumeClaimPolicies": [
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
    }
    body = _jobset(
        "lifecycle",
        ttlSecondsAfterFinished=0,
        failurePolicy={"maxRestarts": 1},
        **claims,
    )

    last_error: list[Exception] = []

    async def created() -> bool:
        try:
            await kube.create(work.path(), body)
        except Exception as error:  # refused while the webhook is not listening yet
            last_error[:] = [error]
            return False
        return True

    try:
        await eventually(
            created, "JobSet admitted by the controller's own webhook", 60, interval=0.2
        )
    except AssertionError as error:
        raise AssertionError(f"{error}; last refusal: {last_error}") from None

    # Restart: a failed Job makes the controller delete every Job and create attempt 1.
    await eventually(lambda: work.has_jobs("lifecycle", 2), "two Jobs created", 30, interval=0.2)
    first = (await work.live_jobs("lifecycle"))[0]["metadata"]["name"]
    await work.sim.fail(first)
    await eventually(
        lambda: work.has_jobs("lifecycle", 2, attempt="1"), "jobs of attempt 1", 30, interval=0.2
    )
    # Completion, then ttlSecondsAfterFinished: 0 deletes the JobSet.
    for job in await work.live_jobs("lifecycle"):
        await work.sim.complete(job["metadata"]["name"])
    await eventually(lambda: work.gone("lifecycle"), "JobSet deleted by its TTL", 30, interval=0.2)

    # Suspend, change the template, resume: Jobs patched, started ones get startTime cleared.
    await kube.create(work.path(), _jobset("pausable"))
    await eventually(
        lambda: work.has_jobs("pausable", 2), "pausable Jobs created", 30, interval=0.2
    )
    for job in await work.live_jobs("pausable"):
        await work.sim.start(job["metadata"]["name"])
    await kube.merge_patch(work.path("pausable"), {"spec": {"suspend": True}})

    async def all_suspended() -> bool:
        return all(j["spec"].get("suspend") for j in await work.live_jobs("pausable"))

    await eventually(all_suspended, "Jobs suspended", 30, interval=0.2)
    # The Job controller's part of a suspension: pods gone, startTime kept until someone clears it.
    for job in await work.live_jobs("pausable"):
        await work.sim.set_status(job["metadata"]["name"], {"active": 0, "ready": 0})
    selector = {"topology.jobset.test/rack": "rack-1"}

    async def resume_with_selector() -> bool:
        js = await kube.get(work.path("pausable"))
        pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["nodeSelector"] = selector
        js["spec"]["suspend"] = False
        try:
            await kube.replace(work.path("pausable"), js)
        except Conflict:  # the controller wrote the status in between
            return False
        return True

    await eventually(resume_with_selector, "JobSet resumed with a node selector", 30, interval=0.2)

    async def resumed() -> bool:
        jobs = await work.live_jobs("pausable")
        return bool(jobs) and all(
            not j["spec"].get("suspend")
            and j["spec"]["template"]["spec"].get("nodeSelector") == selector
            for j in jobs
        )

    await eventually(resumed, "Jobs resumed with the new template", 30, interval=0.2)

    # A quota of zero Jobs: creates are refused again and again, the event repeats as a series.
    quota_path = f"/api/v1/namespaces/{namespace}/resourcequotas"
    zero = {"count/jobs.batch": "0"}
    await kube.create(quota_path, {"metadata": {"name": "jobs"}, "spec": {"hard": zero}})
    await kube.merge_patch(f"{quota_path}/jobs/status", {"status": {"hard": zero, "used": zero}})
    await kube.create(work.path(), _jobset("refused"))

    # A scrape of the secure /metrics: the controller reviews the reader's token.
    async def scraped() -> bool:
        headers = {"Authorization": f"Bearer {running.reader_token}"}
        async with (
            aiohttp.ClientSession() as http,
            http.get(running.metrics_url, headers=headers, ssl=False) as answer,
        ):
            return answer.status == 200

    await eventually(scraped, "/metrics served to the metrics-reader", 30, interval=0.2)

    # Someone empties the webhook Secret: the controller rewrites it (a new CA), injects the new
    # CA, and admission works again.
    secret_path = f"/api/v1/namespaces/{running.home}/secrets/{SECRET}"
    secret = await kube.get(secret_path)
    old_ca = secret["data"]["ca.crt"]
    secret["data"] = {}
    await kube.replace(secret_path, secret)

    async def reinjected() -> bool:
        data = (await kube.get(secret_path)).get("data") or {}
        if data.get("ca.crt") in (None, old_ca):
            return False
        configuration = await kube.get(f"{MUTATING}/{MUTATING_WEBHOOK_CONFIGURATION}")
        return bool(configuration["webhooks"][0]["clientConfig"].get("caBundle") == data["ca.crt"])

    await eventually(reinjected, "the Secret rewritten and its CA injected", 30, interval=0.2)

    async def admitted_again() -> bool:
        try:
            await kube.create(work.path(), _jobset("after-reset"))
        except Exception:  # the API server may hold the previous bundle for a moment
            return False
        return True

    await eventually(admitted_again, "a JobSet admitted with the new CA", 30, interval=0.2)

    await _exercise_pod_placement(kube, namespace)
    await _exercise_stuck_pod(kube, namespace)

    # A claim that already exists: the webhook reads it (it is in the controller's PVC cache)
    # to compare it with the template, and refuses a JobSet that would delete it.
    await kube.create(
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
        {"metadata": {"name": "data-reuse"}, **claims["volumeClaimPolicies"][0]["templates"][0]},
    )
    reuse = _jobset("reuse", **claims)

    async def refused_for_its_existing_claim() -> bool:
        try:
            await kube.create(work.path(), reuse)
        except Exception as refusal:
            return "retentionPolicy.whenDeleted" in str(refusal)
        await kube.delete(work.path("reuse"))  # admitted before the cache held the claim
        return False

    await eventually(
        refused_for_its_existing_claim, "the existing claim read and checked", 30, interval=0.2
    )

    # Grants that need an API the pinned cluster does not serve (gang scheduling's, 1.37) are
    # exercised where it is served, not here.
    declared = {
        (grant.group, grant.resource, verb)
        for grant in CLUSTER_GRANTS + NAMESPACE_GRANTS
        if not grant.needs
        for verb in grant.verbs
    }

    async def every_grant_used() -> bool:
        return declared <= _used(control_plane.audit_events(user))

    try:
        await eventually(every_grant_used, "every grant used", 30, interval=0.2)
    finally:
        events = control_plane.audit_events(user)
        refused = [
            (e["verb"], e.get("objectRef"), e.get("annotations", {}))
            for e in events
            if e.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid"
        ]
        assert refused == [], f"requests the shipped roles refused: {refused}"
        unused = sorted(declared - _used(events))
        assert unused == [], f"grants nothing used (group, resource, verb): {unused}"
