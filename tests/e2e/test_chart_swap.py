"""Helm users swap charts: a release installed from upstream's chart is upgraded to ours and
rolled back, with JobSets in several states, and nothing they own is touched.

On a full local cluster of its own (the chart's webhook configurations and ClusterRoles are
cluster-wide): `helm install` of upstream's chart (charts/jobset of sigs.k8s.io/jobset v0.12.0,
from hack/upstream-jobset.sh; its CRD too, the cluster starts without one), then `helm upgrade` of
the same release to charts/jobset-controller with upstream's values file unchanged, then `helm
rollback`. The chart's Deployment gets kwok pods that run nothing; the controller that acts is a
host process, as the release's ServiceAccount (a token for it), with the Configuration read from
the release's ConfigMap (loopback ports added): upstream's binary first, ours after the upgrade,
upstream's again after the rollback (each stopped with SIGTERM, as a rollout does).

One change to what the charts render, the only way the API server can reach a webhook here (there
is no Service network): a helm post-renderer points each webhook at 127.0.0.1 by URL instead of
at the chart's Service. The Service, the Secret and the configurations keep the charts' names;
the certificate chain is the real one: the test plays upstream's certificate rotator once (a CA
and serving certificate in the chart's Secret, the CA in every caBundle), ours keeps that CA
through the chart's names (Configuration -> Secret -> configurations), and upstream's binary
serves what the Secret holds after the rollback.

Checked after the upgrade and after the rollback: every JobSet and every Job, pod and Service it
owns has the uid it had (nothing deleted or recreated), no restart counted, no terminal state
lost; every object both charts render kept its uid (helm patched it); every name an object refers
to resolves (bindings' roles and subjects, the Deployment's ServiceAccount, ConfigMap and Secret,
the Configuration's Service and Secret, upstream's ServiceMonitor selector); bindings the cluster
made to the chart's roles by name still grant (editor, viewer, metrics reader: a scraper reads
the running controller's /metrics with them); and admission goes through the chart's
configurations to whichever controller runs, which defaults and refuses with the same webhook
name in the message.
"""

from __future__ import annotations

import base64
import datetime
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from jobset_controller.controller.webhookcerts import CA_COMMON_NAME, CA_ORGANIZATION
from jobset_controller.manager.environment import default_cert_policy
from jobset_controller.runtime.certs import Action, Identity, Material, renew
from jobset_controller_dev.envtest.controller import ControllerProcess
from jobset_controller_dev.envtest.fullcluster import FullCluster, condition_true
from jobset_controller_dev.envtest.install import chart_fullname
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.upstream import (
    UpstreamController,
    ensure_upstream,
    upstream_chart,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OUR_CHART = ROOT / "charts" / "jobset-controller"
RELEASE = "jobset"
SYSTEM = "jobset-system"
JOBS = "swap-jobs"
FULLNAME = chart_fullname(RELEASE)
CONTROLLER = f"{FULLNAME}-controller"
CONFIG_MAP = f"{CONTROLLER}-config"
CONFIG_KEY = "controller_manager_config.yaml"
WEBHOOK_SERVICE = f"{FULLNAME}-webhook-service"
SECRET = f"{FULLNAME}-webhook-server-cert"
METRICS_SERVICE = f"{FULLNAME}-metrics-service"
CONFIGURATIONS = (
    ("mutatingwebhookconfigurations", "jobset-mutating-webhook-configuration"),
    ("validatingwebhookconfigurations", "jobset-validating-webhook-configuration"),
)
VALIDATING_JOBSET_WEBHOOK = "validate-jobset-x-k8s-io-v1alpha2-jobset.x-k8s.io"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{JOBS}/jobsets"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
TERMINAL = ("Completed", "Failed", "Suspended")

# kind -> (API prefix, resource, namespaced): what the two charts render by default.
KINDS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
}

Key = tuple[str, str]  # kind, name (namespaced objects are all in SYSTEM)

# Rewrites each webhook's clientConfig from the chart's Service to a URL on 127.0.0.1 (the only
# change to what the charts render; see the module docstring). argv[1]: the webhook port.
POST_RENDERER = """
import sys
import yaml

base = "https://127.0.0.1:" + sys.argv[1]
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
for doc in docs:
    if doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in doc.get("webhooks") or []:
            hook["clientConfig"] = {"url": base + hook["clientConfig"]["service"]["path"]}
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
"""


# ---------------------------------------------------------------------------- small helpers


def get(cluster: FullCluster, path: str) -> dict[str, Any]:
    status, body = cluster.request("GET", path)
    assert status == 200, (path, status, body)
    return body


def exists(cluster: FullCluster, path: str) -> bool:
    status, _ = cluster.request("GET", path)
    return status == 200


def object_path(kind: str, name: str) -> str:
    prefix, resource, namespaced = KINDS[kind]
    return (
        f"{prefix}/namespaces/{SYSTEM}/{resource}/{name}"
        if namespaced
        else (f"{prefix}/{resource}/{name}")
    )


class Helm:
    def __init__(self, cluster: FullCluster, workdir: Path, webhook_port: int) -> None:
        self.binary = cluster.bin_dir / "helm"
        self.kubeconfig = cluster.kubeconfig
        renderer = workdir / "post-renderer"
        renderer.write_text(f"#!{sys.executable}\n{POST_RENDERER}")
        renderer.chmod(0o755)
        self.post_render = [
            f"--post-renderer={renderer}",
            f"--post-renderer-args={webhook_port}",
        ]

    def __call__(self, *args: str) -> str:
        result = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, check=False, timeout=scaled(300),
        )  # fmt: skip
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    def release_keys(self) -> set[Key]:
        manifest = self("get", "manifest", RELEASE, "-n", SYSTEM)
        return {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(manifest) if d}


def live_uids(cluster: FullCluster, keys: set[Key]) -> dict[Key, str]:
    return {key: get(cluster, object_path(*key))["metadata"]["uid"] for key in keys}


def chart_configuration(cluster: FullCluster) -> dict[str, Any]:
    config_map = get(cluster, object_path("ConfigMap", CONFIG_MAP))
    config: dict[str, Any] = yaml.safe_load(config_map["data"][CONFIG_KEY])
    return config


def token_for(cluster: FullCluster, namespace: str, account: str) -> str:
    cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}}
    )
    status, body = cluster.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, body
    token: str = body["status"]["token"]
    return token


def scrape(port: int, token: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed or the test CA: the bearer token is the point
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=scaled(10), context=context) as reply:
        text: str = reply.read().decode()
        return text


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\s+(\S+)", re.M)


def metric(text: str, name: str, label: str) -> float:
    """The sum of `name`'s samples whose labels include `label` (e.g. controller="jobset")."""
    return sum(
        float(value)
        for sample, labels, value in _SAMPLE.findall(text)
        if sample == name and label in labels.split(",")
    )


def wait_idle(port: int, token: str, jobsets: int) -> None:
    """Until the controller has reconciled at least once per JobSet and its queue is empty."""

    seen = ["no scrape yet"]

    def idle() -> bool:
        try:
            text = scrape(port, token)
        except (OSError, urllib.error.URLError) as error:
            seen[0] = f"scrape failed: {error}"
            return False
        reconciles = metric(text, "controller_runtime_reconcile_total", 'controller="jobset"')
        depth = metric(text, "workqueue_depth", 'name="jobset"')
        seen[0] = f"{reconciles:g} reconciles, queue depth {depth:g}"
        return reconciles >= jobsets and depth == 0

    poll(
        idle,
        f"the controller reconciled {jobsets} JobSets and its queue is empty",
        90,
        state=lambda: seen[0],
    )


# ------------------------------------------------------------------------- what JobSets own
def owned(cluster: FullCluster) -> dict[str, str]:
    """JobSets and what they own (Jobs, Services; the Jobs' pods): "kind/name" -> uid."""
    jobsets = cluster.list_items(JOBSETS)
    uids = {f"JobSet/{j['metadata']['name']}": j["metadata"]["uid"] for j in jobsets}
    owners = set(uids.values())

    def children(path: str, kind: str, parents: set[str]) -> dict[str, str]:
        found = {}
        for item in cluster.list_items(path):
            meta = item["metadata"]
            if any(ref["uid"] in parents for ref in meta.get("ownerReferences") or ()):
                assert "deletionTimestamp" not in meta, f"{kind}/{meta['name']} is being deleted"
                found[f"{kind}/{meta['name']}"] = meta["uid"]
        return found

    jobs = children(f"/apis/batch/v1/namespaces/{JOBS}/jobs", "Job", owners)
    services = children(f"/api/v1/namespaces/{JOBS}/services", "Service", owners)
    pods = children(f"/api/v1/namespaces/{JOBS}/pods", "Pod", set(jobs.values()))
    return {**uids, **jobs, **services, **pods}


def states(cluster: FullCluster) -> dict[str, tuple[int, tuple[str, ...]]]:
    """Per JobSet: restarts and the terminal conditions that are True."""
    return {
        j["metadata"]["name"]: (
            (j.get("status") or {}).get("restarts", 0),
            tuple(kind for kind in TERMINAL if condition_true(j, kind)),
        )
        for j in cluster.list_items(JOBSETS)
    }


def running_pods(cluster: FullCluster, jobset: str) -> int:
    pods = cluster.list_items(
        f"/api/v1/namespaces/{JOBS}/pods", label_selector=f"{NAME_LABEL}={jobset}"
    )
    return sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == "Running")


def forever(name: str, replicas: int = 1, pods: int = 1) -> dict[str, Any]:
    return replicated_job(name, replicas, pods=pods, annotations={RUN_FOREVER_ANNOTATION: "true"})


# ------------------------------------------------------------------------ names and admission
def check_references(cluster: FullCluster, keys: set[Key]) -> None:
    """Every name the release's objects, its Configuration and upstream's ServiceMonitor refer
    to resolves."""
    for kind, name in keys:
        body = get(cluster, object_path(kind, name))
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            ref = body["roleRef"]
            assert exists(cluster, object_path(ref["kind"], ref["name"])), (name, ref)
            for subject in body.get("subjects") or ():
                if subject["kind"] == "ServiceAccount" and subject["namespace"] == SYSTEM:
                    assert exists(cluster, object_path("ServiceAccount", subject["name"])), subject
        if kind == "Deployment":
            pod = body["spec"]["template"]["spec"]
            assert exists(cluster, object_path("ServiceAccount", pod["serviceAccountName"]))
            for volume in pod.get("volumes") or ():
                if "configMap" in volume:
                    assert exists(cluster, object_path("ConfigMap", volume["configMap"]["name"]))
                if "secret" in volume:
                    assert exists(cluster, object_path("Secret", volume["secret"]["secretName"]))
    internal = chart_configuration(cluster)["internalCertManagement"]
    assert internal["webhookServiceName"] == WEBHOOK_SERVICE
    assert internal["webhookSecretName"] == SECRET
    assert exists(cluster, object_path("Service", WEBHOOK_SERVICE))
    assert exists(cluster, object_path("Secret", SECRET))
    # What upstream's ServiceMonitor (and a user's copy of it) selects: the metrics Service.
    selector = f"app.kubernetes.io/name=jobset,app.kubernetes.io/instance={RELEASE}"
    services = cluster.list_items(
        f"/api/v1/namespaces/{SYSTEM}/services",
        label_selector=f"{selector},app.kubernetes.io/component=controller",
    )
    assert [s["metadata"]["name"] for s in services] == [METRICS_SERVICE]
    assert "https" in {p["name"] for p in services[0]["spec"]["ports"]}


def can(cluster: FullCluster, user: str, verb: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "resourceAttributes": {
                "namespace": JOBS, "verb": verb, "group": "jobset.x-k8s.io", "resource": "jobsets",
            },
        },
    }  # fmt: skip
    status, body = cluster.request(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
    )
    assert status == 201, body
    return bool(body["status"].get("allowed"))


def check_user_bindings(cluster: FullCluster) -> None:
    """The cluster's bindings to the chart's editor and viewer roles, by name, still grant."""
    assert can(cluster, "alice", "create")
    assert can(cluster, "alice", "delete")
    assert can(cluster, "bob", "list")
    assert not can(cluster, "bob", "create")


def check_admission(cluster: FullCluster, name: str) -> None:
    """A JobSet created now goes through the chart's configurations: defaulted by the mutating
    webhook, and an invalid one refused by the validating webhook under upstream's chart's name."""
    status, created = cluster.request("POST", JOBSETS, jobset_manifest(name, replicated_jobs=[
        forever("w")]))  # fmt: skip
    assert status == 201, created
    assert created["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    bad = jobset_manifest(f"{name}-bad", replicated_jobs=[forever("w")])
    bad["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["nope"]}
    status, refused = cluster.request("POST", JOBSETS, bad)
    assert status == 422, refused
    assert (
        f'admission webhook "{VALIDATING_JOBSET_WEBHOOK}" denied the request'
        in (refused["message"])
    )
    assert (
        "invalid replicatedJob name 'nope' does not appear in .spec.ReplicatedJobs"
        in (refused["message"])
    )
    poll(
        lambda: running_pods(cluster, name) == 1,
        f"{name}'s pod running",
        90,
        state=lambda: f"{running_pods(cluster, name)} running",
    )


def upstream_rotator(cluster: FullCluster) -> Material:
    """What upstream's certificate rotator does at start, played here (its own writes to the
    fixed host path /tmp/k8s-webhook-server/serving-certs): a valid certificate in the chart's
    Secret is kept, else a new CA and serving certificate for the Service's name (and 127.0.0.1,
    where the webhooks are called here) are written to it; the CA goes in every caBundle."""
    secret = get(cluster, object_path("Secret", SECRET))
    material = Material.from_secret_data(secret.get("data"))
    if material is None:
        material = renew(
            None,
            Action.NEW_CA,
            Identity(CA_COMMON_NAME, CA_ORGANIZATION, (f"{WEBHOOK_SERVICE}.{SYSTEM}.svc",),
                     ("127.0.0.1",)),
            default_cert_policy(),
            datetime.datetime.now(datetime.UTC),
        )  # fmt: skip
        secret["data"] = material.secret_data()
        status, body = cluster.request("PUT", object_path("Secret", SECRET), secret)
        assert status == 200, body
    ca_bundle = base64.b64encode(material.ca_bundle).decode()
    for resource, name in CONFIGURATIONS:
        path = f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}"
        configuration = get(cluster, path)
        for hook in configuration["webhooks"]:
            hook["clientConfig"]["caBundle"] = ca_bundle
        status, body = cluster.request("PUT", path, configuration)
        assert status == 200, body
    return material


def wait_admits(cluster: FullCluster) -> None:
    """Until the API server admits a JobSet through the webhooks (a dry run): it applies a
    changed caBundle from its own watch of the configurations, a moment after the write."""
    probe = jobset_manifest("admission-probe", replicated_jobs=[forever("w")])
    answers: list[tuple[int, dict[str, Any]]] = [(0, {})]

    def admits() -> bool:
        answers[0] = cluster.request("POST", f"{JOBSETS}?dryRun=All", probe)
        return answers[0][0] == 201

    poll(
        admits,
        "the API server admits through the webhooks",
        90,
        state=lambda: f"dry run answered {answers[0][0]}: {answers[0][1].get('message')}",
    )


# ------------------------------------------------------------------------------- the fixture
@pytest.fixture(scope="module")
def cluster() -> Iterator[FullCluster]:
    full = FullCluster(crd_paths=[]).start()  # the CRD comes from upstream's chart
    try:
        yield full
    finally:
        full.stop()


def test_a_release_moves_from_upstreams_chart_to_ours_and_back_with_jobsets_untouched(
    cluster: FullCluster, tmp_path: Path
) -> None:
    upstream_bin = ensure_upstream()
    webhook_port = free_port()
    helm = Helm(cluster, tmp_path, webhook_port)

    # --- upstream's chart, CRD included --------------------------------------------------
    helm("install", RELEASE, str(upstream_chart(upstream_bin)), "-n", SYSTEM,
         "--create-namespace", *helm.post_render)  # fmt: skip
    poll(lambda: exists(cluster, JOBSETS), "the JobSet API served (upstream's CRD)", 90)
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
    crd_uid = get(cluster, crd_path)["metadata"]["uid"]
    upstream_keys = helm.release_keys()
    check_references(cluster, upstream_keys)

    # The cluster's own references to the chart's objects, by name.
    cluster.create_namespace(JOBS)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for user, role in (("alice", "jobset-editor-role"), ("bob", "jobset-viewer-role")):
        status, body = cluster.request("POST", f"{rbac}/namespaces/{JOBS}/rolebindings", {
            "metadata": {"name": f"{user}-jobsets"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": f"{FULLNAME}-{role}"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        })  # fmt: skip
        assert status == 201, body.get("message")
    status, body = cluster.request("POST", f"{rbac}/clusterrolebindings", {
        "metadata": {"name": "swap-scraper-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"{FULLNAME}-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": JOBS}],
    })  # fmt: skip
    assert status == 201, body
    scraper = token_for(cluster, JOBS, "scraper")
    check_user_bindings(cluster)

    # The release's ServiceAccount: both controllers run as it, with the chart's RBAC.
    kubeconfig = cluster.service_account_kubeconfig(
        SYSTEM, CONTROLLER, tmp_path / "controller.kubeconfig"
    )
    metrics_dir = tmp_path / "metrics-certs"
    metrics_dir.mkdir()
    cluster.ca.write_pair(metrics_dir, "swap-metrics", common_name="metrics",
                          ip_addresses=("127.0.0.1",), server=True)  # fmt: skip

    def start_upstream(phase: str) -> tuple[UpstreamController, Material]:
        serving = upstream_rotator(cluster)
        cert_dir = tmp_path / f"upstream-{phase}-certs"
        cert_dir.mkdir()
        (cert_dir / "tls.crt").write_bytes(serving.cert)
        (cert_dir / "tls.key").write_bytes(serving.key)
        config = chart_configuration(cluster)
        config["leaderElection"] = {"leaderElect": False}
        config["internalCertManagement"]["enable"] = False  # its rotator writes to /tmp
        config["webhook"] = {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)}
        config["metrics"] = {"certDir": str(metrics_dir)}
        path = tmp_path / f"upstream-{phase}.yaml"
        path.write_text(yaml.safe_dump(config))
        controller = UpstreamController(
            upstream_bin, kubeconfig=kubeconfig, config=path, log=tmp_path / f"upstream-{phase}.log"
        )
        controller.wait_ready()
        wait_admits(cluster)
        return controller, serving

    # --- upstream runs JobSets in several states -------------------------------------------
    upstream, material = start_upstream("before")
    jobsets = [
        jobset_manifest("running", replicated_jobs=[forever("workers", 2, 2), forever("driver")]),
        jobset_manifest("suspended", replicated_jobs=[forever("w")], suspend=True),
        jobset_manifest("completed", replicated_jobs=[replicated_job("w", 1, pods=1)]),
        jobset_manifest("failed", replicated_jobs=[replicated_job(
            "w", 1, pods=1, backoff_limit=0, annotations={FAIL_EXIT_CODE_ANNOTATION: "3"})]),
    ]  # fmt: skip
    for jobset in jobsets:
        status, body = cluster.request("POST", JOBSETS, jobset)
        assert status == 201, body.get("message")
    poll(
        lambda: running_pods(cluster, "running") == 5,
        "the running JobSet's 5 pods running",
        90,
        state=lambda: f"{running_pods(cluster, 'running')} running",
    )
    poll(lambda: states(cluster) == {
            "running": (0, ()), "suspended": (0, ("Suspended",)),
            "completed": (0, ("Completed",)), "failed": (0, ("Failed",)),
        }, "every JobSet in its state", 90, state=lambda: f"states {states(cluster)}")  # fmt: skip
    check_admission(cluster, "before-swap")
    wait_idle(upstream.metrics_port, scraper, 5)
    expected_owned, expected_states = owned(cluster), states(cluster)

    # --- helm upgrade to ours, with upstream's values file unchanged ------------------------
    before_upgrade = live_uids(cluster, upstream_keys)
    helm("upgrade", RELEASE, str(OUR_CHART), "-n", SYSTEM,
         "-f", str(upstream_chart(upstream_bin) / "values.yaml"),
         "--set", "image.repository=jobset-controller", "--set", "image.tag=swap-test",
         *helm.post_render)  # fmt: skip
    our_keys = helm.release_keys()
    assert our_keys <= upstream_keys, our_keys - upstream_keys  # every name is upstream's
    assert live_uids(cluster, our_keys) == {key: before_upgrade[key] for key in our_keys}
    check_references(cluster, our_keys)
    check_user_bindings(cluster)

    # The rollout: upstream stops, ours starts with the release's (now our chart's)
    # Configuration; internal certificate management on, as the chart configures it.
    upstream.stop()
    config = chart_configuration(cluster)
    assert config["internalCertManagement"]["enable"] is True
    config["leaderElection"] = {"leaderElect": False, "resourceNamespace": SYSTEM}
    config["webhook"] = {"host": "127.0.0.1", "port": webhook_port,
                         "certDir": str(tmp_path / "ours-certs")}  # fmt: skip
    (tmp_path / "ours.yaml").write_text(yaml.safe_dump(config))
    ours_metrics = free_port()
    ours = ControllerProcess(
        kubeconfig=kubeconfig,
        config=tmp_path / "ours.yaml",
        log=tmp_path / "ours.log",
        metrics=f"127.0.0.1:{ours_metrics}",
        args=["--leader-elect=false", "--webhook-cert-extra-sans=127.0.0.1"],
    )
    try:
        ours.wait_ready(90, interval=0.2)

        def certificate_kept() -> bool:
            data = get(cluster, object_path("Secret", SECRET))["data"]
            if base64.b64decode(data["ca.crt"]) != material.ca_bundle:
                return False  # a new CA: the swap would have broken every caBundle
            names = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"])).extensions
            dns = names.get_extension_for_class(x509.SubjectAlternativeName).value
            if f"{WEBHOOK_SERVICE}.{SYSTEM}.svc" not in dns.get_values_for_type(x509.DNSName):
                return False
            return all(
                hook["clientConfig"].get("caBundle") == data["ca.crt"]
                for resource, name in CONFIGURATIONS
                for hook in get(
                    cluster, f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}"
                )["webhooks"]
            )

        poll(certificate_kept, "ours keeps the CA in the chart's Secret and caBundles", 90)
        wait_admits(cluster)
        wait_idle(ours_metrics, scraper, 5)
        assert owned(cluster) == expected_owned
        assert states(cluster) == expected_states
        check_admission(cluster, "after-upgrade")
        # The pod webhooks answer under the chart's names, and ours recognises them.
        poll(
            lambda: (
                metric(
                    scrape(ours_metrics, scraper),
                    "jobset_exclusive_placement_mode",
                    'mode="leader-follower"',
                )
                == 1
            ),
            "ours' placement probe finds the chart's pod webhooks",
            90,
            state=lambda: ours.tail(1500),
        )
        wait_idle(ours_metrics, scraper, 6)
        expected_owned, expected_states = owned(cluster), states(cluster)
        assert expected_states["after-upgrade"] == (0, ())

        # Ours under our chart: the chart's RBAC sufficed. (After the rollback below, ours
        # runs on, as an old pod does during a rollout, under upstream's roles and with the
        # Secret blanked by upstream's chart: a refused write or a new CA there is expected.)
        under_our_chart = (tmp_path / "ours.log").read_text()
        assert " 403" not in under_our_chart

        # --- helm rollback to upstream's chart -----------------------------------------
        before_rollback = live_uids(cluster, our_keys)
        helm("rollback", RELEASE, "1", "-n", SYSTEM)
        assert helm.release_keys() == upstream_keys
        assert live_uids(cluster, our_keys) == before_rollback
        check_references(cluster, upstream_keys)
        check_user_bindings(cluster)
    finally:
        code = ours.stop(60)
    assert code == 0, ours.tail()

    # Upstream again. Rolling back to upstream's chart blanks the Secret (its chart renders the
    # keys empty, and helm's patch sets what a chart renders): ours, still running then, may
    # have written a new one; upstream's rotator keeps a valid one or makes another.
    upstream, _ = start_upstream("after")
    try:
        wait_idle(upstream.metrics_port, scraper, 6)
        assert owned(cluster) == expected_owned
        assert states(cluster) == expected_states
        check_admission(cluster, "after-rollback")
        assert get(cluster, crd_path)["metadata"]["uid"] == crd_uid
    finally:
        upstream.stop()
