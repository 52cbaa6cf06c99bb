"""The shipped roles are exactly what the controller uses: proven with the API server's audit log.

`jobset-controller run` (leader election and admission webhooks on) runs as a ServiceAccount bound
only to manifests/rbac/role.yaml, and is taken through every path that makes an API call: create,
restart, completion and TTL deletion with volumeClaimPolicies admitted by its own webhook; suspend
and resume with a changed template; Job creates refused by a quota (a repeated event). Then the
audit log must show no request the roles refused, and every verb of every grant used at least once:
a grant nothing used is a failure (remove it from controller/permissions.py, or add the path that
uses it here).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobset_controller.controller.permissions import CLUSTER_GRANTS, NAMESPACE_GRANTS
from jobset_controller.runtime.client import Conflict, KubeClient, NotFound
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.identities import service_account_user, shipped_rbac
from jobset_controller_dev.envtest.kubesim import KubeSim
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.webhooks import (
    MUTATING,
    VALIDATING,
    jobset_webhook_configuration,
)

ACCOUNT = "controller-manager"


def _jobset(name: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if "volumeClaimPolicies" in spec:
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod = {"restartPolicy": "Never", "containers": [container]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {"spec": {"backoffLimit": 0, "template": {"spec": pod}}},
                }
            ],
            **spec,
        },
    }


async def _eventually(check: Callable[[], Awaitable[bool]], what: str, within: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: not reached within {within} s")
        await asyncio.sleep(0.2)


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
) -> AsyncIterator[str]:
    """`run` as the shipped ServiceAccount in its own namespace; yields its audit username."""
    home = f"jobset-system-{uuid.uuid4().hex[:6]}"
    pair = control_plane.ca.issue(
        f"webhook-{home}", common_name="webhook", dns_names=("localhost",),
        ip_addresses=("127.0.0.1",), server=True,
    )  # fmt: skip
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
    (certs / "tls.key").write_bytes(pair.key.read_bytes())
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": True, "resourceNamespace": home},
                "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
            }
        )
    )
    base = f"https://127.0.0.1:{port}"
    ca = control_plane.ca.cert_pem
    mutating = jobset_webhook_configuration(
        f"m-{home}", "mjobset.kb.io", base + MUTATE_PATH, ca, namespace, ["CREATE"]
    )
    validating = jobset_webhook_configuration(
        f"v-{home}", "vjobset.kb.io", base + VALIDATE_PATH, ca, namespace, ["CREATE", "UPDATE"]
    )
    with shipped_rbac(control_plane, home, [ACCOUNT], tmp_path) as kubeconfigs:
        proc = _start_run(kubeconfigs[ACCOUNT], config, tmp_path / "controller.log")
        await kube.create(MUTATING, mutating)
        await kube.create(VALIDATING, validating)
        try:
            yield service_account_user(home, ACCOUNT)
        finally:
            await kube.request("DELETE", f"{MUTATING}/{mutating['metadata']['name']}")
            await kube.request("DELETE", f"{VALIDATING}/{validating['metadata']['name']}")
            proc.terminate()
            assert proc.wait(30) == 0, (tmp_path / "controller.log").read_text()[-3000:]
            control_plane.request("DELETE", f"/api/v1/namespaces/{home}")


def _start_run(kubeconfig: Path, config: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "jobset_controller", "run",
            f"--kubeconfig={kubeconfig}", f"--config={config}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            "--log-format=json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )  # fmt: skip


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
    controller_as_service_account: str,
) -> None:
    user = controller_as_service_account
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
        await _eventually(created, "JobSet admitted by the controller's own webhook", within=60)
    except AssertionError as error:
        raise AssertionError(f"{error}; last refusal: {last_error}") from None

    # Restart: a failed Job makes the controller delete every Job and create attempt 1.
    await _eventually(lambda: work.has_jobs("lifecycle", 2), "two Jobs created")
    first = (await work.live_jobs("lifecycle"))[0]["metadata"]["name"]
    await work.sim.fail(first)
    await _eventually(lambda: work.has_jobs("lifecycle", 2, attempt="1"), "jobs of attempt 1")
    # Completion, then ttlSecondsAfterFinished: 0 deletes the JobSet.
    for job in await work.live_jobs("lifecycle"):
        await work.sim.complete(job["metadata"]["name"])
    await _eventually(lambda: work.gone("lifecycle"), "JobSet deleted by its TTL")

    # Suspend, change the template, resume: Jobs patched, started ones get startTime cleared.
    await kube.create(work.path(), _jobset("pausable"))
    await _eventually(lambda: work.has_jobs("pausable", 2), "pausable Jobs created")
    for job in await work.live_jobs("pausable"):
        await work.sim.start(job["metadata"]["name"])
    await kube.merge_patch(work.path("pausable"), {"spec": {"suspend": True}})

    async def all_suspended() -> bool:
        return all(j["spec"].get("suspend") for j in await work.live_jobs("pausable"))

    await _eventually(all_suspended, "Jobs suspended")
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

    await _eventually(resume_with_selector, "JobSet resumed with a node selector")

    async def resumed() -> bool:
        jobs = await work.live_jobs("pausable")
        return bool(jobs) and all(
            not j["spec"].get("suspend")
            and j["spec"]["template"]["spec"].get("nodeSelector") == selector
            for j in jobs
        )

    await _eventually(resumed, "Jobs resumed with the new template")

    # A quota of zero Jobs: creates are refused again and again, the event repeats as a series.
    quota_path = f"/api/v1/namespaces/{namespace}/resourcequotas"
    zero = {"count/jobs.batch": "0"}
    await kube.create(quota_path, {"metadata": {"name": "jobs"}, "spec": {"hard": zero}})
    await kube.merge_patch(f"{quota_path}/jobs/status", {"status": {"hard": zero, "used": zero}})
    await kube.create(work.path(), _jobset("refused"))

    declared = {
        (grant.group, grant.resource, verb)
        for grant in CLUSTER_GRANTS + NAMESPACE_GRANTS
        for verb in grant.verbs
    }

    async def every_grant_used() -> bool:
        return declared <= _used(control_plane.audit_events(user))

    try:
        await _eventually(every_grant_used, "every grant used", within=30)
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
