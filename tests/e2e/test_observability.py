"""A real Prometheus scrapes the running controller: every metric the shipped dashboard and alert
rules query must be in what it scraped, and every one of their expressions must run.

The session's controller (tests/e2e/conftest.py) serves /metrics and its webhooks. The test makes
each metric family have a series: a JobSet that completes and one that fails (the jobset_*
counters), one that restarts into an attempt whose pod never gets ready (the restart metrics, the
gauge of a restart in progress included), one admission request straight to the validating
webhook (controller_runtime_webhook_*), and the reconciles they cause (controller_runtime_*,
workqueue_*, rest_client_*). /metrics is
scraped the way a cluster's Prometheus does it: HTTPS with the bearer token of a ServiceAccount
bound to the metrics-reader role when the endpoint speaks TLS (the secure default), else HTTP.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.e2e.conftest import ControllerEndpoints

from jobset_controller_dev.envtest.controller import write_configuration
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    READY_AFTER_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import container, jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.prometheus import (
    Prometheus,
    dashboard_expressions,
    ensure_prometheus_bin_dir,
    https_scrape_config,
    queried_metrics,
    rule_expressions,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "prometheus" / "jobset-controller.rules.yaml"
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
VALIDATE_PATH = "/validate-jobset-x-k8s-io-v1alpha2-jobset"
JOB = "jobset-controller"

pytestmark = pytest.mark.usefixtures("jobset_controller")


def jobset(name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    workers = replicated_job(
        "w", backoff_limit=0, annotations=annotations, containers=[container("c")]
    )
    return jobset_manifest(name, replicated_jobs=[workers], **spec)


def restart_into_an_unready_attempt(cluster: FullCluster, namespace: str) -> None:
    """A JobSet whose pods get ready only after an hour: its first pod is let get ready and
    fail, the JobSet restarts, and the new attempt's pod stays unready, so the restart stays in
    progress (its gauge has a series) while Prometheus scrapes."""
    held = {RUN_FOREVER_ANNOTATION: "true", READY_AFTER_ANNOTATION: "3600s"}
    body = jobset("restarting", held, failurePolicy={"maxRestarts": 3})
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    status, reply = cluster.request("POST", path, body)
    assert status == 201, reply
    pods = cluster.wait_for(
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=jobset.sigs.k8s.io%2Fjobset-name"
        "%3Drestarting",
        lambda b: len(b.get("items") or ()) == 1,
        what="the first attempt's pod",
    )["items"]
    status, reply = cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{pods[0]['metadata']['name']}",
        {
            "metadata": {
                "annotations": {
                    READY_AFTER_ANNOTATION: "0s",
                    RUN_FOREVER_ANNOTATION: "false",
                    RUN_DURATION_ANNOTATION: "500ms",
                    FAIL_EXIT_CODE_ANNOTATION: "2",
                }
            }
        },
        "application/merge-patch+json",
    )
    assert status == 200, reply
    cluster.wait_for(
        f"{path}/restarting",
        lambda js: (js.get("status") or {}).get("restarts") == 1,
        timeout=60,
        what="restarting restarted",
    )


def speaks_tls(address: str) -> bool:
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, int(port)), timeout=scaled(5)) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (ssl.SSLError, OSError):
        return False


def metrics_reader_token(cluster: FullCluster, namespace: str) -> str:
    """A token of ServiceAccount `<namespace>/prometheus`, allowed to GET /metrics."""
    name = f"metrics-reader-{uuid.uuid4().hex[:6]}"
    rules = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    shipped = ROOT / "charts" / "jobset-controller" / "files" / "metrics-reader-rules.yaml"
    if shipped.is_file():
        rules = yaml.safe_load(shipped.read_text())
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for path, body in (
        (f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "prometheus"}}),
        (f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": rules}),
        (
            f"{rbac}/clusterrolebindings",
            {
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}
                ],
            },
        ),
    ):
        status, reply = cluster.request("POST", path, body)
        assert status == 201, reply
    status, reply = cluster.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/prometheus/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, reply
    return str(reply["status"]["token"])


def admission_request(cluster: FullCluster, address: str, namespace: str) -> None:
    """One AdmissionReview to the validating webhook, as the API server would send it."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"},
            "resource": {"group": "jobset.x-k8s.io", "version": "v1alpha2", "resource": "jobsets"},
            "name": "reviewed",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": jobset("reviewed", {}),
        },
    }
    context = ssl.create_default_context(cadata=cluster.ca.cert_pem.decode())
    request = urllib.request.Request(
        f"https://{address}{VALIDATE_PATH}",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=context, timeout=scaled(10)) as answer:
        assert json.load(answer)["response"]["allowed"] is True


def wanted_metrics() -> dict[str, set[str]]:
    """Metric name -> where it is queried (alert names, dashboard expressions)."""
    wanted: dict[str, set[str]] = {}
    for alert, expression in rule_expressions(RULES).items():
        for name in queried_metrics(expression):
            wanted.setdefault(name, set()).add(f"alert {alert}")
    for expression in dashboard_expressions(DASHBOARD):
        for name in queried_metrics(expression):
            wanted.setdefault(name, set()).add("dashboard")
    return wanted


def test_prometheus_scrapes_every_metric_the_dashboard_and_rules_query(
    full_cluster: FullCluster,
    namespace: str,
    controller_endpoints: ControllerEndpoints,
    tmp_path: Path,
) -> None:
    ensure_prometheus_bin_dir()  # JOBSET_PROMETHEUS_BIN, else hack/prometheus.sh: never skipped
    for name, template_annotations in (
        ("done", {RUN_DURATION_ANNOTATION: "500ms"}),
        ("broken", {FAIL_EXIT_CODE_ANNOTATION: "2"}),
    ):
        status, reply = full_cluster.request(
            "POST",
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets",
            jobset(name, template_annotations),
        )
        assert status == 201, reply
    admission_request(full_cluster, controller_endpoints.webhook, namespace)
    restart_into_an_unready_attempt(full_cluster, namespace)
    for name in ("done", "broken"):
        full_cluster.wait_for(
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}",
            lambda js: (js.get("status") or {}).get("terminalState"),
            timeout=60,
            what=f"{name} finished",
        )
    token = tmp_path / "token"
    token.write_text(metrics_reader_token(full_cluster, namespace))
    # The session's controller runs without leader election; a second one with a Lease of its
    # own (in this namespace) reports leader_election_master_status. Started after both JobSets
    # finished, so it has nothing to write and cannot take the session controller's counts.
    leader_metrics = f"127.0.0.1:{free_port()}"
    config = tmp_path / "leader-config.yaml"
    write_configuration(
        config,
        {
            "leaderElection": {
                "leaderElect": True,
                "resourceName": f"e2e-{namespace}",
                "resourceNamespace": namespace,
            },
        },
    )
    leader = subprocess.Popen(
        [sys.executable, "-m", "jobset_controller", "run",
         f"--kubeconfig={full_cluster.kubeconfig}", f"--config={config}",
         f"--metrics-bind-address={leader_metrics}",
         f"--health-probe-bind-address=127.0.0.1:{free_port()}", "--log-format=json"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "leader.log").open("wb"),
    )  # fmt: skip
    try:
        scrapes = [
            scrape_config(JOB, controller_endpoints.metrics, token),
            scrape_config(f"{JOB}-leader", leader_metrics, token),
        ]
        check_scrape(scrapes, namespace, tmp_path)
    finally:
        leader.send_signal(signal.SIGTERM)
        assert leader.wait(timeout=scaled(60)) == 0, (tmp_path / "leader.log").read_text()[-3000:]


def scrape_config(job: str, address: str, token: Path) -> dict[str, Any]:
    """HTTPS with the token when the endpoint speaks TLS (the secure default), else HTTP."""
    deadline = time.monotonic() + scaled(30)
    while not port_open(address):
        assert time.monotonic() < deadline, f"{address} not listening within {scaled(30):g} s"
        time.sleep(0.2)  # poll interval of the wait for the port
    if speaks_tls(address):
        return https_scrape_config(job, address, token)
    return {"job_name": job, "static_configs": [{"targets": [address]}]}


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=scaled(1)):
            return True
    except OSError:
        return False


def check_scrape(scrapes: list[dict[str, Any]], namespace: str, tmp_path: Path) -> None:

    wanted = wanted_metrics()
    assert len(wanted) >= 15
    with Prometheus(tmp_path / "prometheus", scrape_configs=scrapes, rule_files=[RULES]) as prom:
        for scrape in scrapes:
            job = scrape["job_name"]
            prom.wait_for(f'up{{job="{job}"}}', lambda v: bool(v) and v[0]["value"][1] == "1")
        deadline = time.monotonic() + scaled(90)
        while True:
            scraped = set(prom.api("label/__name__/values"))
            missing = {name: sorted(where) for name, where in wanted.items() if name not in scraped}
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(1)  # poll interval of the wait for every series
        assert not missing, f"queried but not scraped within {scaled(90):g} s: {missing}"
        # Every expression runs (parses, and its metrics have the labels it selects on).
        for expression in dashboard_expressions(DASHBOARD):
            concrete = expression.replace("$__rate_interval", "1m").replace("$job", ".*")
            prom.query(concrete)
        for expression in rule_expressions(RULES).values():
            prom.query(expression)
        # The selectors match the scraped series, not only the names.
        # The second controller reports 0 until it holds its Lease: wait for the value.
        prom.wait_for('leader_election_master_status{name=~"e2e-.*"} == 1', bool)
        assert prom.query('workqueue_depth{name="jobset"}')
        assert prom.query('controller_runtime_reconcile_total{controller="jobset"}')
        assert prom.query(f'jobset_failed_total{{namespace="{namespace}", jobset_name="broken"}}')
        assert prom.query(f'jobset_completed_total{{namespace="{namespace}", jobset_name="done"}}')
        assert prom.query('jobset_restarts_total{action="RestartJobSet"}')
        assert prom.query(
            "jobset_restart_started_timestamp_seconds"
            f'{{namespace="{namespace}", jobset_name="restarting", phase="ready"}}'
        )
        assert prom.query(
            f'controller_runtime_webhook_requests_total{{webhook="{VALIDATE_PATH}", code="200"}}'
        )
        # The rule file loads into the running Prometheus.
        groups = prom.api("rules")["groups"]
        assert {rule["name"] for group in groups for rule in group["rules"]} == set(
            rule_expressions(RULES)
        )
