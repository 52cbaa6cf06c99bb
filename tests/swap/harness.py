"""What the swap tests share: both controllers run as host processes on one full local cluster,
as two ServiceAccounts (so the API server's audit log tells their writes apart), with one
Configuration, one webhook certificate and upstream's webhook configurations, and the JobSets in
every state the issue names.

The controllers: upstream's `jobset-manager` v0.12.0 (envtest/upstream.py) and ours
(`jobset-controller run`), both with leader election on the same Lease
(`6d4f6a47.jobset.x-k8s.io` in jobset-system, short timings so a hand-over after an upstream
SIGTERM, which does not release the Lease, takes seconds), internal certificate management off,
the webhook server on 127.0.0.1 with a pair the test issues from the cluster's CA. The webhook
configurations are upstream's (`webhook/manifests.yaml` of the module, named as its install names
them), each webhook called by URL on 127.0.0.1 (there is no Service network), the pod webhooks
with the shipped objectSelector (JobSet pods only). Both controllers' /metrics are scraped with a
token bound to cluster-admin.

The states (`create_states`), in a namespace of their own:

- running: 2 replicatedJobs, 5 pods running; stays so.
- restarting: restart 1 decided, the first attempt's Jobs held in foreground deletion by a
  finalizer on their pods; once released, attempt 1's Jobs run and restarts stay 1.
- suspended: Suspended=True; stays so.
- depends: `main` waits on `init` Complete (init runs for ever); `main` is never created.
- holder: exclusive per rack, 4 Jobs in the 4 racks; a follower deleted after the swap is
  recreated in its leader's rack.
- waiting: exclusive per rack, its leader Pending (no free rack), its follower refused (Reject)
  or gated (Gate); once the holder is deleted, both pods run in the leader's rack.
- ttl: Completed, `ttlSecondsAfterFinished` pending; deleted when it expires.
- completed, failed: Completed, Failed (backoffLimit 0); stay so.
"""

from __future__ import annotations

import base64
import datetime
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.fullcluster import FullCluster, condition_true
from jobset_controller_dev.envtest.identities import service_account_user
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import RACK_LABEL
from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.upstream import UpstreamController, upstream_home

SYSTEM = "jobset-system"
LEASE_NAME = "6d4f6a47.jobset.x-k8s.io"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/{LEASE_NAME}"
OURS_ACCOUNT, UPSTREAM_ACCOUNT, SCRAPER = "ours-jobset", "upstream-jobset", "swap-scraper"
HOLD = "swap.jobset.test/hold"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
INDEX = "batch.kubernetes.io/job-completion-index"
GATE = "jobset.sigs.k8s.io/exclusive-placement"
PRIORITY_CLASS = "swap-exclusive"  # exclusive Jobs exclude only their own priority's pods
TTL_SECONDS = 30
TERMINAL = ("Completed", "Failed", "Suspended")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# Writes that are not the controllers' JobSet work: the Lease (both contend for it) and the Event
# upstream records on it, metrics authentication reviews, and dry runs (our placement probe).
_NOT_WORK = {"leases", "tokenreviews", "subjectaccessreviews"}
_WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# Generous: two cores shared with other test runs.
WAIT = 120.0


def jobsets_path(ns: str) -> str:
    return f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"


# ---------------------------------------------------------------------------------- metrics
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\s+(\S+)", re.M)


def scrape(port: int, token: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed metrics certificates; the token matters
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=scaled(10), context=context) as reply:
        text: str = reply.read().decode()
        return text


def metric(text: str, name: str, label: str) -> float:
    return sum(
        float(value)
        for sample, labels, value in _SAMPLE.findall(text)
        if sample == name and label in labels.split(",")
    )


# ------------------------------------------------------------------------------- controllers
@dataclass
class Running:
    """One controller process: which side, as whom, where its metrics are."""

    side: str  # "ours" | "upstream"
    user: str
    metrics_port: int
    stop: Callable[[], int | None]
    log: Path
    started: datetime.datetime  # before the process was spawned

    def tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""


class Bench:
    """The cluster-wide setup of the swap tests (module docstring)."""

    def __init__(self, cluster: FullCluster, workdir: Path, upstream_bin: Path) -> None:
        self.cluster, self.workdir, self.upstream_bin = cluster, workdir, upstream_bin
        status, _ = cluster.request("GET", f"/api/v1/namespaces/{SYSTEM}")
        if status == 404:
            cluster.create_namespace(SYSTEM)
        self.kubeconfigs = {
            side: cluster.service_account_kubeconfig(SYSTEM, account, workdir / f"{side}.kubecfg")
            for side, account in (("ours", OURS_ACCOUNT), ("upstream", UPSTREAM_ACCOUNT))
        }
        cluster.service_account_kubeconfig(SYSTEM, SCRAPER, workdir / "scraper.kubeconfig")
        subjects = [
            {"kind": "ServiceAccount", "name": name, "namespace": SYSTEM}
            for name in (OURS_ACCOUNT, UPSTREAM_ACCOUNT, SCRAPER)
        ]
        status, body = cluster.request(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": "swap-controllers"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": subjects,
            },
        )
        assert status in (201, 409), body
        status, body = cluster.request(
            "POST",
            f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{SCRAPER}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert status == 201, body
        self.token: str = body["status"]["token"]
        status, body = cluster.request(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": PRIORITY_CLASS}, "value": 1000},
        )
        assert status in (201, 409), body
        self.cert_dir = workdir / "webhook-certs"
        cluster.ca.write_pair(
            self.cert_dir, "swap-webhook", common_name="webhook", dns_names=("localhost",),
            ip_addresses=("127.0.0.1",), server=True,
        )  # fmt: skip
        self.webhook_port = free_port()

    # ---------------------------------------------------------------- configuration, webhooks
    def configuration(
        self, name: str, *, port: int | None = None, followers: str | None = None
    ) -> Path:
        """Upstream's Configuration (both read it; `followers` adds our one key of our own)."""
        sections: dict[str, Any] = {
            "leaderElection": {
                "leaderElect": True,
                "resourceNamespace": SYSTEM,
                "leaseDuration": "4s",
                "renewDeadline": "3s",
                "retryPeriod": "1s",
            },
            "internalCertManagement": {"enable": False},
            "webhook": {
                "host": "127.0.0.1",
                "port": port or self.webhook_port,
                "certDir": str(self.cert_dir),
            },
        }
        if followers is not None:
            sections["exclusivePlacement"] = {"followers": followers}
        return write_configuration(self.workdir / f"{name}.yaml", sections)

    def register_webhooks(self, port: int | None = None) -> None:
        """Upstream's two webhook configurations, as its install names them, every webhook by
        URL to 127.0.0.1:`port` with the test's CA (created, or updated in place)."""
        ca = base64.b64encode(self.cluster.ca.cert_pem).decode()
        base = f"https://127.0.0.1:{port or self.webhook_port}"
        manifests = upstream_home(self.upstream_bin) / "webhook" / "manifests.yaml"
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            resource = (
                "mutatingwebhookconfigurations"
                if doc["kind"] == "MutatingWebhookConfiguration"
                else "validatingwebhookconfigurations"
            )
            name = f"jobset-{doc['metadata']['name']}"
            doc["metadata"] = {"name": name}
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": base + path, "caBundle": ca}
                if hook["rules"][0]["resources"] == ["pods"]:
                    hook["objectSelector"] = {
                        "matchExpressions": [{"key": JOBSET_NAME, "operator": "Exists"}]
                    }
            status, current = self.cluster.request("GET", f"{ADMISSION}/{resource}/{name}")
            if status == 200:
                doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                status, body = self.cluster.request("PUT", f"{ADMISSION}/{resource}/{name}", doc)
                assert status == 200, body
            else:
                status, body = self.cluster.request("POST", f"{ADMISSION}/{resource}", doc)
                assert status == 201, body

    # ---------------------------------------------------------------------------- processes
    def start_upstream(self, config: Path, name: str) -> Running:
        log = self.workdir / f"{name}.log"
        started = datetime.datetime.now(datetime.UTC)
        process = UpstreamController(
            self.upstream_bin, kubeconfig=self.kubeconfigs["upstream"], config=config, log=log
        )
        process.wait_ready(WAIT)
        return Running(
            "upstream",
            service_account_user(SYSTEM, UPSTREAM_ACCOUNT),
            process.metrics_port,
            lambda: process.stop(30),
            log,
            started,
        )

    def start_ours(self, config: Path, name: str) -> Running:
        log = self.workdir / f"{name}.log"
        port = free_port()
        started = datetime.datetime.now(datetime.UTC)
        process = ControllerProcess(
            kubeconfig=self.kubeconfigs["ours"],
            config=config,
            log=log,
            metrics=f"127.0.0.1:{port}",
        )
        process.wait_ready(WAIT, interval=0.2)
        user = service_account_user(SYSTEM, OURS_ACCOUNT)
        return Running("ours", user, port, lambda: process.stop(60), log, started)

    def lease_holder(self) -> str:
        status, lease = self.cluster.request("GET", LEASE)
        return str((lease.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""

    def wait_idle(self, controller: Running, jobsets: int) -> None:
        """Until `controller` leads, has reconciled every JobSet at least once since it started
        and its JobSet queue is empty."""

        seen = ["no scrape yet"]

        def idle() -> bool:
            try:
                text = scrape(controller.metrics_port, self.token)
            except (OSError, urllib.error.URLError) as error:
                seen[0] = f"scrape failed: {error}"
                return False
            reconciled = metric(text, "controller_runtime_reconcile_total", 'controller="jobset"')
            depth = metric(text, "workqueue_depth", 'name="jobset"')
            seen[0] = f"{reconciled:g} reconciles, queue depth {depth:g}"
            return reconciled >= jobsets and depth == 0

        poll(
            idle,
            f"{controller.side} reconciled {jobsets} JobSets, queue empty",
            WAIT,
            state=lambda: seen[0],
        )

    def writes(
        self,
        controller: Running,
        since: datetime.datetime | None = None,
        *,
        accepted_only: bool = False,
    ) -> list[tuple[datetime.datetime, str, str, str]]:
        """The JobSet work `controller` wrote since `since` (default: since it started; the
        ServiceAccount is the same for every test), from the audit log: (time, verb, resource,
        name), oldest first. Lease writes, metrics reviews and dry runs are not work.
        `accepted_only` leaves out the writes the API server refused (4xx/5xx answers): they
        changed nothing."""
        since = since or controller.started
        found = []
        seen: set[str] = set()
        for event in self.cluster.audit_events(controller.user):
            ref = event.get("objectRef") or {}
            if event.get("verb") not in _WRITES or ref.get("resource") in _NOT_WORK:
                continue
            if ref.get("resource") == "events" and str(ref.get("name")).startswith(LEASE_NAME):
                continue  # the "became leader" Event upstream records on the Lease
            if "dryRun" in str(event.get("requestURI")) or event["auditID"] in seen:
                continue
            if accepted_only and int((event.get("responseStatus") or {}).get("code", 0)) >= 400:
                continue
            seen.add(event["auditID"])
            at = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"])
            if at < since:
                continue
            resource = ref.get("resource", "") + (
                f"/{ref['subresource']}" if ref.get("subresource") else ""
            )
            found.append((at, str(event["verb"]), resource, str(ref.get("name") or "")))
        return sorted(found)


# ------------------------------------------------------------------------------------ states
def _forever(name: str, replicas: int = 1, pods: int = 1, **kw: Any) -> dict[str, Any]:
    return replicated_job(
        name, replicas, pods=pods, annotations={RUN_FOREVER_ANNOTATION: "true"}, **kw
    )


def _exclusive(name: str, jobs: int) -> dict[str, Any]:
    workers = _forever("w", jobs, 2, backoff_limit=3,
                       pod_spec={"priorityClassName": PRIORITY_CLASS})  # fmt: skip
    return jobset_manifest(name, replicated_jobs=[workers], annotations={EXCLUSIVE: RACK_LABEL})


def state_manifests() -> list[dict[str, Any]]:
    restarting = _forever("w", 2, 1, backoff_limit=0)
    restarting["template"]["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    return [
        jobset_manifest("running", replicated_jobs=[_forever("workers", 2, 2), _forever("driver")]),
        jobset_manifest("restarting", replicated_jobs=[restarting],
                        failurePolicy={"maxRestarts": 3}),
        jobset_manifest("suspended", replicated_jobs=[_forever("w")], suspend=True),
        jobset_manifest("depends", replicated_jobs=[
            _forever("init"),
            _forever("main", dependsOn=[{"name": "init", "status": "Complete"}]),
        ]),
        _exclusive("holder", 4),
        jobset_manifest("completed", replicated_jobs=[replicated_job("w", 1, pods=1)]),
        jobset_manifest("failed", replicated_jobs=[replicated_job(
            "w", 1, pods=1, backoff_limit=0, annotations={FAIL_EXIT_CODE_ANNOTATION: "3"})]),
    ]  # fmt: skip


def pods(cluster: FullCluster, ns: str, jobset: str, *, live: bool = True) -> list[dict[str, Any]]:
    found = cluster.list_items(
        f"/api/v1/namespaces/{ns}/pods", label_selector=f"{JOBSET_NAME}={jobset}"
    )
    if not live:
        return found
    return [
        p
        for p in found
        if not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Failed", "Succeeded")
    ]


def jobs(cluster: FullCluster, ns: str, jobset: str) -> list[dict[str, Any]]:
    return cluster.list_items(
        f"/apis/batch/v1/namespaces/{ns}/jobs", label_selector=f"{JOBSET_NAME}={jobset}"
    )


def running(cluster: FullCluster, ns: str, jobset: str) -> int:
    return sum(1 for p in pods(cluster, ns, jobset) if p["status"].get("phase") == "Running")


def get_jobset(cluster: FullCluster, ns: str, name: str) -> dict[str, Any]:
    status, body = cluster.request("GET", f"{jobsets_path(ns)}/{name}")
    return body if status == 200 else {}


def state_of(jobset: dict[str, Any]) -> tuple[int, tuple[str, ...]]:
    status = jobset.get("status") or {}
    return status.get("restarts", 0), tuple(k for k in TERMINAL if condition_true(jobset, k))


def create(cluster: FullCluster, ns: str, manifest: dict[str, Any]) -> None:
    status, body = cluster.request("POST", jobsets_path(ns), manifest)
    assert status == 201, body.get("message")


def create_states(cluster: FullCluster, ns: str, *, waiting_follower: str) -> None:
    """Every state of the module docstring, each waited for. `waiting_follower`: "refused"
    (Reject: the Job has no follower pod) or "gated" (Gate: the follower waits behind it)."""

    def seen() -> str:
        return overview(cluster, ns)

    for manifest in state_manifests():
        create(cluster, ns, manifest)
    poll(
        lambda: running(cluster, ns, "holder") == 8,
        "holder: 8 pods running, one Job per rack",
        WAIT,
        state=seen,
    )
    create(cluster, ns, _exclusive("waiting", 1))
    poll(lambda: running(cluster, ns, "running") == 5, "running: 5 pods running", WAIT, state=seen)
    poll(
        lambda: running(cluster, ns, "restarting") == 2,
        "restarting: 2 pods running",
        WAIT,
        state=seen,
    )
    poll(lambda: running(cluster, ns, "depends") == 1, "depends: init running", WAIT, state=seen)
    # mid-restart: one pod fails (deleted; kwok marks it Failed), its Job fails, the JobSet
    # restarts; the first attempt's Jobs stay in foreground deletion, held by their pods.
    victim = pods(cluster, ns, "restarting")[0]["metadata"]["name"]
    cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{victim}")

    def mid_restart() -> bool:
        held = jobs(cluster, ns, "restarting")
        return (
            state_of(get_jobset(cluster, ns, "restarting"))[0] == 1
            and bool(held)
            and all(j["metadata"].get("deletionTimestamp") for j in held)
        )

    poll(
        mid_restart,
        "restarting: restart 1 decided, attempt 0's Jobs being deleted",
        WAIT,
        state=seen,
    )

    def waiting() -> bool:
        found = pods(cluster, ns, "waiting")
        leaders = [p for p in found if p["metadata"]["annotations"].get(INDEX) == "0"]
        followers = [p for p in found if p["metadata"]["annotations"].get(INDEX) != "0"]
        if len(leaders) != 1 or leaders[0]["spec"].get("nodeName"):
            return False
        if waiting_follower == "gated":
            return len(followers) == 1 and gated(followers[0])
        return not followers

    poll(waiting, f"waiting: leader Pending, follower {waiting_follower}", WAIT, state=seen)
    create(cluster, ns, jobset_manifest("ttl", replicated_jobs=[replicated_job("w", 1, pods=1)],
                                        ttlSecondsAfterFinished=TTL_SECONDS))  # fmt: skip
    expected = {
        "running": (0, ()), "restarting": (1, ()), "suspended": (0, ("Suspended",)),
        "depends": (0, ()), "holder": (0, ()), "waiting": (0, ()),
        "completed": (0, ("Completed",)), "failed": (0, ("Failed",)), "ttl": (0, ("Completed",)),
    }  # fmt: skip
    poll(lambda: states(cluster, ns) == expected, "every JobSet in its state", WAIT, state=seen)


def gated(pod: dict[str, Any]) -> bool:
    return GATE in [g["name"] for g in pod["spec"].get("schedulingGates") or ()]


def states(cluster: FullCluster, ns: str) -> dict[str, tuple[int, tuple[str, ...]]]:
    return {j["metadata"]["name"]: state_of(j) for j in cluster.list_items(jobsets_path(ns))}


def overview(cluster: FullCluster, ns: str) -> str:
    """Each JobSet's restarts, terminal conditions and running pods: what a failed wait on the
    states needs to be understood afterwards."""
    return "; ".join(
        f"{name} {restarts} {conditions} {running(cluster, ns, name)} running"
        for name, (restarts, conditions) in states(cluster, ns).items()
    )


def children(cluster: FullCluster, ns: str, name: str) -> str:
    """A JobSet's Jobs (attempt, deleting, active/failed/succeeded) and pods (phase, deleting,
    finalizers): where a restart that does not complete stopped."""
    parts = []
    for job in jobs(cluster, ns, name):
        meta, status = job["metadata"], job.get("status") or {}
        parts.append(
            f"job {meta['name']} attempt={meta['labels'].get(RESTART_ATTEMPT)} "
            f"deleting={bool(meta.get('deletionTimestamp'))} active={status.get('active', 0)} "
            f"failed={status.get('failed', 0)} succeeded={status.get('succeeded', 0)}"
        )
    for pod in pods(cluster, ns, name, live=False):
        meta = pod["metadata"]
        parts.append(
            f"pod {meta['name']} attempt={(meta.get('labels') or {}).get(RESTART_ATTEMPT)} "
            f"phase={(pod.get('status') or {}).get('phase')} "
            f"deleting={bool(meta.get('deletionTimestamp'))} finalizers={meta.get('finalizers')}"
        )
    return ", ".join(parts) or "no Job, no pod"


# ------------------------------------------------------------------------------- snapshots
@dataclass(frozen=True)
class Snapshot:
    """What a swap must not change: every owned object's uid, every JobSet's status."""

    uids: dict[str, str]
    statuses: dict[str, dict[str, Any]]
    ttl_expires: datetime.datetime | None


def snapshot(cluster: FullCluster, ns: str) -> Snapshot:
    found = cluster.list_items(jobsets_path(ns))
    uids = {f"JobSet/{j['metadata']['name']}": j["metadata"]["uid"] for j in found}
    owners = set(uids.values())

    def children(path: str, kind: str, parents: set[str]) -> dict[str, str]:
        return {
            f"{kind}/{item['metadata']['name']}": item["metadata"]["uid"]
            for item in cluster.list_items(path)
            if any(r["uid"] in parents for r in item["metadata"].get("ownerReferences") or ())
        }

    job_uids = children(f"/apis/batch/v1/namespaces/{ns}/jobs", "Job", owners)
    services = children(f"/api/v1/namespaces/{ns}/services", "Service", owners)
    pod_uids = children(f"/api/v1/namespaces/{ns}/pods", "Pod", set(job_uids.values()))
    ttl = next((j for j in found if j["metadata"]["name"] == "ttl"), None)
    expires = None
    if ttl is not None:
        finished = next(
            c["lastTransitionTime"]
            for c in ttl["status"]["conditions"]
            if c["type"] == "Completed" and c["status"] == "True"
        )
        expires = datetime.datetime.fromisoformat(finished) + datetime.timedelta(
            seconds=TTL_SECONDS
        )
    return Snapshot(
        {**uids, **job_uids, **services, **pod_uids},
        {j["metadata"]["name"]: j.get("status") or {} for j in found},
        expires,
    )


def assert_untouched(before: Snapshot, after: Snapshot) -> None:
    """Nothing deleted or recreated, no status changed; the TTL JobSet (and what it owns) may be
    gone only once its TTL has expired (upstream would have deleted it then too)."""
    expired = before.ttl_expires is not None and datetime.datetime.now(
        datetime.UTC
    ) >= before.ttl_expires - datetime.timedelta(seconds=1)
    lost = {key for key in before.uids if key not in after.uids}
    if expired:
        lost = {key for key in lost if "ttl" not in key}
    assert not lost, f"deleted: {sorted(lost)}"
    changed = {k for k in after.uids if k in before.uids and after.uids[k] != before.uids[k]}
    assert not changed, f"recreated: {sorted(changed)}"
    new = set(after.uids) - set(before.uids)
    assert not new, f"created: {sorted(new)}"
    for name, status in before.statuses.items():
        if name in after.statuses:
            assert after.statuses[name] == status, (name, status, after.statuses[name])


# ----------------------------------------------------------------------------- convergence
def release_holds(cluster: FullCluster, ns: str, names: Iterable[str] | None = None) -> None:
    """Remove the test's finalizer from every pod holding it (the restart then completes)."""
    for pod in cluster.list_items(f"/api/v1/namespaces/{ns}/pods"):
        finalizers = pod["metadata"].get("finalizers") or []
        if HOLD in finalizers and (names is None or pod["metadata"]["name"] in names):
            index = finalizers.index(HOLD)
            patch = [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": HOLD},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ]
            cluster.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                patch,
                content_type="application/json-patch+json",
            )


def rack(cluster: FullCluster, node: str) -> str:
    status, body = cluster.request("GET", f"/api/v1/nodes/{node}")
    assert status == 200, body
    return str(body["metadata"]["labels"][RACK_LABEL])


def placed_in_leaders_rack(cluster: FullCluster, ns: str, job: str) -> bool:
    """Every live pod of `job` bound, the follower(s) with the leader's rack as nodeSelector."""
    found = [p for p in pods(cluster, ns, job.split("-w-")[0]) if p["metadata"]["labels"].get(
        "batch.kubernetes.io/job-name") == job]  # fmt: skip
    leaders = [p for p in found if p["metadata"]["annotations"].get(INDEX) == "0"]
    followers = [p for p in found if p["metadata"]["annotations"].get(INDEX) != "0"]
    if len(leaders) != 1 or not followers or not all(p["spec"].get("nodeName") for p in found):
        return False
    domain = rack(cluster, leaders[0]["spec"]["nodeName"])
    return all(
        (f["spec"].get("nodeSelector") or {}).get(RACK_LABEL) == domain
        and rack(cluster, f["spec"]["nodeName"]) == domain
        and not gated(f)
        for f in followers
    )


def converge(cluster: FullCluster, ns: str, before: Snapshot) -> None:
    """What every JobSet reaches once the test lets it move on (module docstring): the restart
    completes, the TTL expires, everything else stays where it was with no restart counted."""

    def seen() -> str:
        return f"{overview(cluster, ns)}; restarting: {children(cluster, ns, 'restarting')}"

    release_holds(cluster, ns)

    def restarted() -> bool:
        found = jobs(cluster, ns, "restarting")
        return (
            len(found) == 2
            and all(j["metadata"]["labels"].get(RESTART_ATTEMPT) == "1" for j in found)
            and running(cluster, ns, "restarting") == 2
        )

    poll(restarted, "restarting: attempt 1's Jobs running", WAIT, state=seen)
    poll(
        lambda: not get_jobset(cluster, ns, "ttl"),
        "ttl: deleted when its TTL expired",
        WAIT + TTL_SECONDS,
        state=seen,
    )
    assert before.ttl_expires is not None
    assert datetime.datetime.now(datetime.UTC) >= before.ttl_expires - datetime.timedelta(
        seconds=1
    ), "ttl deleted before its TTL expired"
    assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
            for j in jobs(cluster, ns, "depends")} == {"init"}  # fmt: skip
    assert running(cluster, ns, "running") == 5
    assert not pods(cluster, ns, "suspended")
    assert states(cluster, ns) == {
        "running": (0, ()), "restarting": (1, ()), "suspended": (0, ("Suspended",)),
        "depends": (0, ()), "waiting": (0, ()),
        "completed": (0, ("Completed",)), "failed": (0, ("Failed",)),
    }  # fmt: skip


def controller_managers(cluster: FullCluster, ns: str) -> dict[str, set[str]]:
    """The field managers of the JobSet controllers' writes, per object of `ns`: a JobSet's
    status writes, and every write of a Job or Service but a status one (the Job controller's).
    Both controllers write as upstream's manager name (api.constants.FIELD_MANAGER), so an
    object written by one and then the other carries that one name."""
    found: dict[str, set[str]] = {}
    paths = {
        "JobSet": jobsets_path(ns),
        "Job": f"/apis/batch/v1/namespaces/{ns}/jobs",
        "Service": f"/api/v1/namespaces/{ns}/services",
    }
    for kind, path in paths.items():
        for item in cluster.list_items(path):
            entries = item["metadata"].get("managedFields") or ()
            status = [e for e in entries if e.get("subresource") == "status"]
            written = status if kind == "JobSet" else [e for e in entries if e not in status]
            if written:
                found[f"{kind}/{item['metadata']['name']}"] = {e["manager"] for e in written}
    return found


def delete_a_follower(cluster: FullCluster, ns: str) -> str:
    """Delete a running follower of the holder's first Job (the Job controller recreates it,
    backoffLimit 3); return the Job's name."""
    job = "holder-w-0"
    follower = next(
        p for p in pods(cluster, ns, "holder")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
        and p["metadata"]["annotations"].get(INDEX) == "1"
    )  # fmt: skip
    status, body = cluster.request(
        "DELETE", f"/api/v1/namespaces/{ns}/pods/{follower['metadata']['name']}"
    )
    assert status == 200, body
    poll(
        lambda: any(
            p["metadata"]["uid"] != follower["metadata"]["uid"]
            and p["metadata"]["annotations"].get(INDEX) == "1"
            and p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
            for p in pods(cluster, ns, "holder")
        ),
        "the holder's deleted follower recreated",
        WAIT,
    )
    return job


def free_the_racks(cluster: FullCluster, ns: str) -> None:
    status, body = cluster.request("DELETE", f"{jobsets_path(ns)}/holder")
    assert status == 200, body
    poll(lambda: not pods(cluster, ns, "holder", live=False), "the holder's pods gone", WAIT)
