"""The controller installed from the release's `manifests.yaml` (the default install, image
pinned) and, separately, from the release's packaged Helm chart, in a Pod on the real node:
probes, in-cluster credentials, the shipped RBAC, webhooks through their Service, real pods that
find each other by their JobSet hostnames, restricted Pod Security. On the manifests' install
also: exclusive placement through the pod webhooks, metrics behind TokenReview, two replicas, a
killed container.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from jobset_controller_dev.envtest.install import (
    Install,
    install_chart,
    install_manifests,
    uninstall_chart,
    uninstall_manifests,
    wait_rollout,
    wait_service_served,
)
from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.realnode import NODE_NAME, RealNode
from jobset_controller_dev.image.release import Release

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
CHART_RELEASE = "jobset"


def jobsets_and_pods(node: RealNode, namespace: str) -> str:
    """The namespace's JobSets' status and each pod's phase and container states: what a
    failed wait on a JobSet needs to be understood afterwards."""
    _, listed = node.cluster.request("GET", JOBSETS.format(namespace=namespace))
    lines = [
        f"jobset {js['metadata']['name']}: {js.get('status')}" for js in listed.get("items", [])
    ]
    for pod in pods(node, namespace, ""):
        status = pod.get("status") or {}
        containers = [(c["name"], c.get("state")) for c in status.get("containerStatuses") or []]
        lines.append(f"pod {pod['metadata']['name']}: {status.get('phase')} {containers}")
    return "\n".join(lines)


@pytest.fixture(scope="module", params=["manifests", "chart"])
def installed(
    request: pytest.FixtureRequest, node: RealNode, release: Release
) -> Iterator[Install]:
    """The controller installed as users install a release: `kubectl apply --server-side -f
    manifests.yaml`, or `helm install` of the packaged chart with nothing set."""
    if request.param == "manifests":
        install = install_manifests(node, release.manifests)
    else:
        install = install_chart(
            node, release.chart, release=CHART_RELEASE, namespace="jobset-chart"
        )
    try:
        wait_rollout(node, install)
        wait_service_served(node, install.namespace, install.webhook_service)
        yield install
    finally:
        if request.param == "manifests":
            uninstall_manifests(node, release.manifests)
        else:
            uninstall_chart(node, release=CHART_RELEASE, namespace=install.namespace)


# The scenarios beyond installing and admitting run once, on the manifests' install.
manifests_only = pytest.mark.parametrize("installed", ["manifests"], indirect=True)


@pytest.fixture
def namespace(node: RealNode) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:6]}"
    node.cluster.create_namespace(name)
    try:
        yield name
    finally:
        node.cluster.delete_namespace(name)


def pods(node: RealNode, namespace: str, selector: str) -> list[dict[str, Any]]:
    _, body = node.cluster.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    )
    return list(body.get("items", []))


def controller_pods(node: RealNode, install: Install) -> list[dict[str, Any]]:
    return pods(node, install.namespace, install.pod_selector)


def controller_log(node: RealNode, install: Install) -> str:
    return "".join(
        node.logs(install.namespace, pod["metadata"]["name"], install.container)
        for pod in controller_pods(node, install)
    )


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def python_jobset(name: str, image: str, script: str, *, replicas: int = 2) -> dict[str, Any]:
    """A JobSet whose pods run `script` with the image's Python."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "worker",
                                            "image": image,
                                            "imagePullPolicy": "Never",
                                            "command": [
                                                "/opt/jobset-controller/bin/python",
                                                "-c",
                                                script,
                                            ],
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }


# Each pod listens on 7777, then resolves its peer by the hostname JobSet promises
# (<jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>) and exchanges a line with it;
# it ends once the peer has been answered too.
PEER_SCRIPT = """
import os, socket, sys, threading, time
me = int(os.environ["HOSTNAME"].split("-")[-2])
peer = "{name}-w-%d-0.{name}" % (1 - me)
server = socket.create_server(("", 7777))
def answer():
    conn, _ = server.accept()
    conn.sendall(b"hello from %d\\n" % me)
    conn.close()
answering = threading.Thread(target=answer, daemon=True)
answering.start()
deadline = time.time() + {peer_wait}
while True:
    try:
        address = socket.gethostbyname(peer)
        with socket.create_connection((address, 7777), timeout=5) as conn:
            print(peer, address, conn.recv(100).decode().strip(), flush=True)
        break
    except OSError as error:
        if time.time() > deadline:
            print("cannot reach", peer, error, flush=True)
            sys.exit(1)
        time.sleep(0.5)
# Up until the peer has had its answer too (not a fixed delay): the pod's server must outlive
# its own exchange only as long as the other pod still needs it.
answering.join(max(0.0, deadline - time.time()))
if answering.is_alive():
    print("the peer never connected", flush=True)
    sys.exit(1)
"""


# ------------------------------------------------------------------------------ the install
def test_the_controller_becomes_ready_through_the_kubelets_probes(
    node: RealNode, installed: Install
) -> None:
    (pod,) = controller_pods(node, installed)
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert condition(pod, "Ready")
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"]
    assert status["restartCount"] == 0


def test_internal_certificates_fill_the_secret_and_every_ca_bundle(
    node: RealNode, installed: Install
) -> None:
    _, secret = node.cluster.request(
        "GET", f"/api/v1/namespaces/{installed.namespace}/secrets/{installed.secret}"
    )
    assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret.get("data") or {})
    for kind, name in (
        ("mutatingwebhookconfigurations", "jobset-mutating-webhook-configuration"),  # upstream's
        ("validatingwebhookconfigurations", "jobset-validating-webhook-configuration"),
    ):
        _, config = node.cluster.request(
            "GET", f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}"
        )
        bundles = [hook["clientConfig"].get("caBundle") for hook in config["webhooks"]]
        assert bundles
        assert all(bundles), (name, bundles)
        assert set(bundles) == {secret["data"]["ca.crt"]}


# What the API server answers when RBAC denies a request: `... is forbidden: User "<who>" cannot
# <verb> resource ...` (in the JSON log the quote is escaped). Other 403s are not about the
# roles: a create in a namespace being deleted (another module's, which this controller also
# watches) is refused "forbidden: unable to create new content in namespace ... because it is
# being terminated" (seen under load, and it failed this test).
RBAC_DENIAL = re.compile(r'forbidden: User \\?"[^"\\]+\\?" cannot ')


def test_the_shipped_rbac_is_all_it_needs(node: RealNode, installed: Install) -> None:
    log = controller_log(node, installed)
    assert "caches synced" in log
    denials = [line for line in log.splitlines() if RBAC_DENIAL.search(line)]
    assert denials == [], denials[:5]


def test_its_pod_runs_restricted_as_65532_with_a_read_only_root(
    node: RealNode, installed: Install
) -> None:
    _, namespace = node.cluster.request("GET", f"/api/v1/namespaces/{installed.namespace}")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (pod,) = controller_pods(node, installed)
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    info = json.loads(node.ctr("containers", "info", container))
    process = info["Spec"]["process"]
    assert process["user"]["uid"] == 65532
    assert info["Spec"]["root"]["readonly"] is True
    assert process["capabilities"].get("effective", []) == []
    assert process.get("noNewPrivileges") is True


# ------------------------------------------------------------------------------ admission
def test_admission_through_the_webhook_service_defaults_and_refuses(
    node: RealNode, installed: Install, namespace: str, image: str
) -> None:
    jobset = python_jobset("defaulted", image, "print('hi')", replicas=1)
    status, created = node.cluster.request("POST", JOBSETS.format(namespace=namespace), jobset)
    assert status == 201, created.get("message")
    assert created["spec"]["network"] == {
        "enableDNSHostnames": True,
        "publishNotReadyAddresses": True,
    }
    assert created["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}

    bad = python_jobset("bad", image, "print('hi')", replicas=1)
    bad["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["does-not-exist"]}
    status, refused = node.cluster.request("POST", JOBSETS.format(namespace=namespace), bad)
    assert status == 422, refused
    assert (
        "invalid replicatedJob name 'does-not-exist' does not appear in .spec.ReplicatedJobs"
        in refused["message"]
    )


# ------------------------------------------------------------------------------ real pods
def test_a_jobset_of_real_pods_completes_and_its_pods_reach_each_other_by_hostname(
    node: RealNode, installed: Install, namespace: str, image: str
) -> None:
    name = "peers"
    # The pods' own wait for their peer is a wait of the suite too: scaled.
    script = PEER_SCRIPT.replace("{name}", name).replace("{peer_wait}", f"{scaled(90):g}")
    jobset = python_jobset(name, image, script)
    status, body = node.cluster.request("POST", JOBSETS.format(namespace=namespace), jobset)
    assert status == 201, body

    def finished() -> dict[str, Any] | None:
        _, current = node.cluster.request("GET", f"{JOBSETS.format(namespace=namespace)}/{name}")
        done = condition(current, "Completed") or condition(current, "Failed")
        return current if done else None

    final = poll(
        finished,
        "the JobSet finished",
        180,
        state=lambda: jobsets_and_pods(node, namespace),
        interval=0.25,
    )
    logs = {
        pod["metadata"]["name"]: node.logs(namespace, pod["metadata"]["name"], "worker")
        for pod in pods(node, namespace, f"jobset.sigs.k8s.io/jobset-name={name}")
    }
    assert condition(final, "Completed"), (final.get("status"), logs)
    assert len(logs) == 2
    for pod, log in logs.items():
        me = int(pod.split("-")[2])
        assert f"{name}-w-{1 - me}-0.{name}" in log, log
        assert f"hello from {1 - me}" in log, log


# ------------------------------------------------------------------------------ metrics
def _metrics(node: RealNode, install: Install, token: str | None) -> tuple[int, str]:
    _, service = node.cluster.request(
        "GET", f"/api/v1/namespaces/{install.namespace}/services/{install.metrics_service}"
    )
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed, as the shipped ServiceMonitor says
    conn = http.client.HTTPSConnection(service["spec"]["clusterIP"], 8443, context=context)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", "/metrics", headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read().decode()
    finally:
        conn.close()


@manifests_only
def test_metrics_need_the_token_of_a_metrics_reader(
    node: RealNode, installed: Install, namespace: str
) -> None:
    wait_service_served(node, installed.namespace, installed.metrics_service)
    assert _metrics(node, installed, None)[0] == 401
    cluster = node.cluster
    stranger, reader = (_token(node, namespace, name) for name in ("stranger", "reader"))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"reader-{namespace}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": installed.metrics_reader_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }
    status, body = cluster.request(
        "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding
    )
    assert status == 201, body
    try:
        assert _metrics(node, installed, stranger)[0] == 403  # authenticated, not a reader
        status, text = _metrics(node, installed, reader)
        assert status == 200
        assert 'controller_runtime_reconcile_total{controller="jobset"' in text
    finally:
        cluster.request(
            "DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/reader-{namespace}"
        )


def _token(node: RealNode, namespace: str, account: str) -> str:
    """A token of a new ServiceAccount `account`."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    node.cluster.request("POST", path, {"metadata": {"name": account}})
    status, token = node.cluster.request(
        "POST",
        f"{path}/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, token
    return str(token["status"]["token"])


# ------------------------------------------------------------------------------ placement
@manifests_only
def test_exclusive_placement_goes_through_the_pod_webhooks_service(
    node: RealNode, installed: Install, namespace: str, image: str
) -> None:
    name = "excl"
    jobset = python_jobset(name, image, "import time; time.sleep(3)", replicas=1)
    jobset["metadata"]["annotations"] = {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"
    }
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["parallelism"] = job["completions"] = 2
    status, body = node.cluster.request("POST", JOBSETS.format(namespace=namespace), jobset)
    assert status == 201, body

    def completed() -> bool:
        _, current = node.cluster.request("GET", f"{JOBSETS.format(namespace=namespace)}/{name}")
        return condition(current, "Completed")

    poll(
        completed,
        "the exclusive JobSet completed",
        180,
        state=lambda: jobsets_and_pods(node, namespace),
        interval=0.25,
    )
    _, jobs = node.cluster.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")
    (made,) = jobs["items"]
    template_labels = made["spec"]["template"]["metadata"]["labels"]
    # The pod webhooks were found active: the leader-follower mode, not the affinity fallback.
    assert template_labels["jobset.sigs.k8s.io/exclusive-placement"] == "leader-follower"
    placed = pods(node, namespace, f"jobset.sigs.k8s.io/jobset-name={name}")
    followers = [
        pod
        for pod in placed
        if pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "1"
    ]
    assert followers
    for follower in followers:
        assert follower["spec"]["nodeSelector"]["kubernetes.io/hostname"] == NODE_NAME
        assert follower["spec"]["nodeName"] == NODE_NAME


# ------------------------------------------------------------------------------ failures
def _container(pod: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = pod["status"]["containerStatuses"][0]
    return status


def _task_pid(node: RealNode, container_id: str) -> int:
    for line in node.ctr("tasks", "list").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task for container {container_id}")


def _jobs_of(node: RealNode, namespace: str, name: str) -> list[str]:
    _, jobs = node.cluster.request(
        "GET",
        f"/apis/batch/v1/namespaces/{namespace}/jobs"
        f"?labelSelector=jobset.sigs.k8s.io/jobset-name={name}",
    )
    return sorted(job["metadata"]["name"] for job in jobs["items"])


@manifests_only
def test_a_killed_container_is_restarted_and_creates_no_job_twice(
    node: RealNode, installed: Install, namespace: str, image: str
) -> None:
    (pod,) = controller_pods(node, installed)
    before = _container(pod)["restartCount"]
    name = "survivor"
    jobset = python_jobset(name, image, "import time; time.sleep(600)", replicas=4)
    status, body = node.cluster.request("POST", JOBSETS.format(namespace=namespace), jobset)
    assert status == 201, body
    poll(
        lambda: _jobs_of(node, namespace, name),
        "the first Job is created",
        60,
        state=lambda: controller_log(node, installed)[-3000:],
        interval=0.25,
    )
    container_id = _container(pod)["containerID"].removeprefix("containerd://")
    os.kill(_task_pid(node, container_id), signal.SIGKILL)

    def restarted_and_ready() -> bool:
        (current,) = controller_pods(node, installed)
        status = _container(current)
        return bool(status["restartCount"] == before + 1 and status["ready"])

    poll(
        restarted_and_ready,
        "the kubelet restarted the controller",
        120,
        state=lambda: str([_container(p) for p in controller_pods(node, installed)]),
        interval=0.25,
    )
    expected = [f"{name}-w-{index}" for index in range(4)]
    poll(
        lambda: _jobs_of(node, namespace, name) == expected,
        "all 4 Jobs",
        60,
        state=lambda: f"Jobs {_jobs_of(node, namespace, name)}",
        interval=0.25,
    )
    _, final = node.cluster.request("GET", f"{JOBSETS.format(namespace=namespace)}/{name}")
    # Recovered without restarting the JobSet (a status not written yet holds no restart either).
    assert (final.get("status") or {}).get("restarts", 0) == 0


def _lease_holder(node: RealNode, install: Install) -> str:
    _, lease = node.cluster.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/{install.namespace}/leases/"
        "6d4f6a47.jobset.x-k8s.io",
    )
    holder: str = (lease.get("spec") or {}).get("holderIdentity") or ""
    return holder


def _lease_time(node: RealNode, install: Install, field: str) -> float:
    _, lease = node.cluster.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/{install.namespace}/leases/"
        "6d4f6a47.jobset.x-k8s.io",
    )
    stamp = lease["spec"][field]
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@manifests_only
def test_of_two_replicas_one_leads_and_another_takes_over_when_it_is_deleted(
    node: RealNode, installed: Install, namespace: str, image: str
) -> None:
    kubectl = node.cluster.kubectl
    deployment = f"deployment/{installed.deployment}"
    kubectl("scale", deployment, "--replicas=2", "-n", installed.namespace)
    try:
        wait_rollout(node, installed)
        names = [pod["metadata"]["name"] for pod in controller_pods(node, installed)]
        assert len(names) == 2

        def live_holder() -> str:
            """The Lease's holder once it is one of the two running processes (after the
            killed-container test the Lease may still name the killed process until it
            expires)."""
            holder = _lease_holder(node, installed)
            for name in names:
                with node.open_log(installed.namespace, name, installed.container) as current:
                    if holder and f'"identity":"{holder}"' in current.read().replace(" ", ""):
                        return holder
            return ""

        holder = poll(live_holder, "a live leader", 60, interval=0.25)
        leader = next(name for name in names if holder.startswith(f"{name}_"))
        standby = next(name for name in names if name != leader)
        # The standby is Ready (it serves admissions) but waits for the Lease.
        assert "attempting to acquire leader lease" in node.logs(
            installed.namespace, standby, installed.container
        )
        watch = subprocess.Popen(
            [
                str(node.cluster.bin_dir / "kubectl"),
                f"--kubeconfig={node.cluster.kubeconfig}",
                "get",
                "pod",
                leader,
                "-n",
                installed.namespace,
                "--watch",
                "-o",
                'jsonpath={.status.containerStatuses[0].state.terminated.exitCode}{"\\n"}',
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        leader_log = node.open_log(installed.namespace, leader, installed.container)
        before = leader_log.read()  # what it logged so far; its last lines are read below
        kubectl("delete", "pod", leader, "-n", installed.namespace, "--wait=false")
        holders: list[str] = []

        def another_leads() -> bool:
            # The standby, or the pod the ReplicaSet starts in the leader's place: whichever
            # asks first after the release.
            holders.append(_lease_holder(node, installed))
            return bool(holders[-1]) and not holders[-1].startswith(f"{leader}_")

        try:
            # the leader drains for 20 s at most, then releases
            poll(another_leads, "another replica holds the Lease", 40, interval=0.25)
        except AssertionError as late:
            raise AssertionError(
                f"{late}: leader {leader}, standby {standby}, holders {sorted(set(holders))}"
            ) from None
        # The webhook Service no longer sends to the deleted pod (waited for, not retried).
        wait_service_served(node, installed.namespace, installed.webhook_service)
        name = "after-takeover"
        jobset = python_jobset(name, image, "print('ok')", replicas=2)
        status, body = node.cluster.request("POST", JOBSETS.format(namespace=namespace), jobset)
        assert status == 201, body
        poll(
            lambda: len(_jobs_of(node, namespace, name)) == 2,
            "the new leader's Jobs",
            120,
            interval=0.25,
        )
        exit_codes = _until_exit_code(watch)
        assert exit_codes == "0", exit_codes
        last_lines = leader_log.read()
        leader_log.close()
        assert "released leader lease" in last_lines, (before[-1500:], last_lines[-3000:])
    finally:
        kubectl("scale", deployment, "--replicas=1", "-n", installed.namespace)
        wait_rollout(node, installed)


def _until_exit_code(watch: subprocess.Popen[str]) -> str:
    """The deleted pod's container exit code, from the watch (the kubelet reports it before the
    pod object goes away)."""
    assert watch.stdout is not None
    try:
        for line in watch.stdout:
            if line.strip():
                return line.strip()
        return ""
    finally:
        watch.kill()
        watch.wait()


# ------------------------------------------------------------------------------ rotation
def _served_serial(address: str) -> int:
    """The serial of the certificate the webhook Service serves now."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((address, 443), timeout=scaled(5)) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@manifests_only
def test_the_serving_certificate_rotates_in_place_without_a_failed_admission(
    node: RealNode, installed: Install, namespace: str, image: str
) -> None:
    cluster, deployment = node.cluster, f"deployment/{installed.deployment}"
    args = json.loads(
        cluster.kubectl(
            "get", deployment, "-n", installed.namespace,
            "-o", "jsonpath={.spec.template.spec.containers[0].args}",
        )
    )  # fmt: skip
    short = ["--webhook-cert-validity=20s", "--webhook-cert-lookahead=10s"]
    patch = [
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/args",
            "value": [*args, *short],
        }
    ]
    cluster.kubectl(
        "patch", deployment, "-n", installed.namespace, "--type=json", f"-p={json.dumps(patch)}"
    )
    try:
        wait_rollout(node, installed)
        wait_service_served(node, installed.namespace, installed.webhook_service)
        # A new Secret, issued under the short lifetimes (the old one is good for a year).
        secret_path = f"/api/v1/namespaces/{installed.namespace}/secrets/{installed.secret}"
        _, old = cluster.request("GET", secret_path)
        cluster.request("DELETE", secret_path)

        def new_ca_injected() -> bool:
            status, secret = cluster.request("GET", secret_path)
            ca = (secret.get("data") or {}).get("ca.crt")
            if status != 200 or not ca or ca == old["data"]["ca.crt"]:
                return False
            _, config = cluster.request(
                "GET",
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                "jobset-validating-webhook-configuration",
            )
            return all(h["clientConfig"].get("caBundle") == ca for h in config["webhooks"])

        poll(new_ca_injected, "a new CA in the Secret and the configurations", 60, interval=0.25)
        _, service = cluster.request(
            "GET", f"/api/v1/namespaces/{installed.namespace}/services/{installed.webhook_service}"
        )
        address = service["spec"]["clusterIP"]
        _, secret = cluster.request("GET", secret_path)
        first = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        left = first.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
        assert left.total_seconds() <= 60, f"issued under other flags: valid for {left} more"
        poll(
            lambda: _served_serial(address) == first.serial_number,
            "the webhook serves the new certificate",
            60,
            interval=0.25,
        )
        serials, answers, failures = {first.serial_number}, 0, []
        # A rotation every ~10 s: three certificates and more (scaled as every wait).
        deadline = time.monotonic() + scaled(60)
        probe = python_jobset("probe", image, "print('hi')", replicas=1)
        while time.monotonic() < deadline and len(serials) < 3:
            status, body = cluster.request(
                "POST", JOBSETS.format(namespace=namespace) + "?dryRun=All", probe
            )
            answers += 1
            if status != 201:
                failures.append((status, body.get("message")))
            serials.add(_served_serial(address))
            time.sleep(0.2)  # the admission traffic's pace, not synchronisation
        assert failures == [], failures
        assert len(serials) >= 3, f"{len(serials)} certificates served in {answers} admissions"
    finally:
        cluster.kubectl(
            "patch", deployment, "-n", installed.namespace, "--type=json",
            "-p=" + json.dumps([{"op": "replace", "path": patch[0]["path"], "value": args}]),
        )  # fmt: skip
        wait_rollout(node, installed)
