"""Secure /metrics with real parts: the API server reviews every token, a real Prometheus scrapes.

`jobset-controller run` runs as a ServiceAccount bound only to the shipped roles, serving /metrics
over HTTPS with its self-signed certificate (secure is the default). Scrapers are two more
ServiceAccounts: one with no RBAC at all, one bound to the shipped `metrics-reader` ClusterRole.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.identities import shipped_rbac
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.prometheus import Prometheus, https_scrape_config

ACCOUNT = "controller-manager"
_RBAC = "/apis/rbac.authorization.k8s.io/v1"


@dataclass
class Running:
    metrics_port: int
    reader_token: str
    stranger_token: str
    log: Path


def _token(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


def scrape(port: int, token: str | None) -> tuple[int, str]:
    """GET /metrics over HTTPS without verifying (the certificate is self-signed)."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=scaled(10), context=insecure) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def running(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Running]:
    home = f"jobset-system-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    write_configuration(
        config,
        {
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            # No webhooks: this test is about /metrics, and port 9443 may be taken.
            "webhook": {"host": "127.0.0.1", "port": 0, "certDir": str(tmp_path / "none")},
        },
    )
    metrics_port, health_port = free_port(), free_port()
    log = tmp_path / "controller.log"
    binding = f"{_RBAC}/clusterrolebindings/{home}-metrics-reader-binding"
    with shipped_rbac(control_plane, home, [ACCOUNT], tmp_path) as kubeconfigs:
        reader = control_plane.service_account_kubeconfig(home, "reader", tmp_path / "r.kube")
        stranger = control_plane.service_account_kubeconfig(home, "stranger", tmp_path / "s.kube")
        status, body = control_plane.request(
            "POST",
            f"{_RBAC}/clusterrolebindings",
            {
                "metadata": {"name": f"{home}-metrics-reader-binding"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"{home}-metrics-reader",  # the shipped role, as shipped_rbac names it
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": home}],
            },
        )
        assert status == 201, body
        process = ControllerProcess(
            kubeconfig=kubeconfigs[ACCOUNT],
            config=config,
            log=log,
            args=["--log-format=json"],
            metrics=f"127.0.0.1:{metrics_port}",
            health_port=health_port,
        )
        try:
            process.wait_ready(60, interval=0.2)
            yield Running(metrics_port, _token(reader), _token(stranger), log)
        finally:
            assert process.stop(30) == 0, process.tail()
            control_plane.request("DELETE", binding)
            control_plane.delete_namespace(home)


def test_metrics_need_a_token_the_api_server_authorises(running: Running) -> None:
    assert scrape(running.metrics_port, None) == (401, "Unauthorized\n")
    assert scrape(running.metrics_port, "not-a-real-token")[0] == 401
    status, body = scrape(running.metrics_port, running.stranger_token)
    assert status == 403
    assert body.startswith("Authorization denied for user system:serviceaccount:")
    status, body = scrape(running.metrics_port, running.reader_token)
    assert status == 200
    for name in (
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "python_info",
        'controller_runtime_reconcile_panics_total{controller="jobset"} 0.0',
        'controller_runtime_terminal_reconcile_errors_total{controller="jobset"} 0.0',
        "controller_runtime_reconcile_total",
    ):
        assert name in body, name
    # Plain HTTP is not served on the metrics port.
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        urllib.request.urlopen(
            f"http://127.0.0.1:{running.metrics_port}/metrics", timeout=scaled(5)
        )
    # Tokens never reach the log.
    text = running.log.read_text()
    assert running.reader_token not in text
    assert running.stranger_token not in text


def test_prometheus_scrapes_over_https_with_a_bearer_token(
    running: Running, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(running.reader_token)
    job = https_scrape_config("jobset-controller", f"127.0.0.1:{running.metrics_port}", token_file)
    denied_file = tmp_path / "denied-token"
    denied_file.write_text(running.stranger_token)
    denied = https_scrape_config("denied", f"127.0.0.1:{running.metrics_port}", denied_file)
    with Prometheus(tmp_path / "prometheus", scrape_configs=[job, denied]) as prometheus:
        prometheus.wait_for(
            'up{job="jobset-controller"} == 1', lambda result: len(result) == 1, within=60
        )
        panics = prometheus.wait_for(
            'controller_runtime_reconcile_panics_total{job="jobset-controller",controller="jobset"}',
            lambda result: len(result) == 1,
        )
        assert panics[0]["value"][1] == "0"
        prometheus.wait_for('up{job="denied"} == 0', lambda result: len(result) == 1)
        [target] = [t for t in prometheus.targets() if t["labels"]["job"] == "denied"]
        assert "403" in target["lastError"]
