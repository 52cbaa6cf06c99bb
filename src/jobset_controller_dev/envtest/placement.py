"""`jobset-controller run` on a full local cluster with its pod webhooks, for exclusive placement.

Why a helper: the e2e tests (both follower modes) and the placement benchmark (with and without
webhooks) start the controller the same way: a serving certificate from the cluster's CA for
127.0.0.1 written to the controller's certDir, the two pod webhook configurations registered by
URL with upstream's entry names (the API server has no pod network, so it calls 127.0.0.1), the
process started with a Configuration file, and a wait until it is ready and has logged the
exclusive placement mode it found (`expect_mode`).

The pod webhook configurations select every JobSet pod of the cluster: use this only on a cluster
whose JobSets this controller alone reconciles.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from jobset_controller.webhook.pods import MUTATE_POD_PATH, VALIDATE_POD_PATH
from jobset_controller_dev.envtest.controller import ControllerProcess, write_configuration
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.polling import scaled
from jobset_controller_dev.envtest.processes import free_port
from jobset_controller_dev.envtest.webhooks import MUTATING, VALIDATING, pod_webhook_configuration

CONTROLLER_NAMESPACE = "jobset-system"
MUTATING_NAME = "jobset-mutating-webhook-configuration"
VALIDATING_NAME = "jobset-validating-webhook-configuration"


class PlacementController:
    """Context manager: the controller with pod webhooks in `followers` mode (Gate or Reject),
    or without any pod webhook (`followers=None`: the affinity-in-job fallback)."""

    def __init__(
        self,
        cluster: FullCluster,
        workdir: Path,
        followers: str | None,
        *,
        metrics_port: int | None = None,
        sections: Mapping[str, Any] | None = None,
    ) -> None:
        """`metrics_port`: serve /metrics there over plain HTTP (a benchmark reads the
        controller's request counts); off by default. `sections`: more of the Configuration
        (e.g. `featureGates`, `earlyJobConditions`), added to what this helper writes."""
        self.cluster = cluster
        self.metrics_port = metrics_port
        self.sections = dict(sections or {})
        self.workdir = workdir
        self.followers = followers
        self.log = workdir / f"controller-{followers or 'fallback'}.log"
        self.process: ControllerProcess | None = None

    def __enter__(self) -> PlacementController:
        cluster = self.cluster
        status, _ = cluster.request("GET", f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}")
        if status == 404:
            cluster.create_namespace(CONTROLLER_NAMESPACE)
        certs = self.workdir / "webhook-certs"
        cluster.ca.write_pair(
            certs,
            "placement-webhook",
            common_name="webhook",
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
            server=True,
        )
        port, health = free_port(), free_port()
        config: dict[str, Any] = {
            "leaderElection": {"leaderElect": False, "resourceNamespace": CONTROLLER_NAMESPACE},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
        }
        if self.followers is not None:
            config["exclusivePlacement"] = {"followers": self.followers}
        config.update(self.sections)
        config_file = write_configuration(self.workdir / "controller-config.yaml", config)
        self._unregister()
        if self.followers is not None:
            base = f"https://127.0.0.1:{port}"
            ca = cluster.ca.cert_pem
            mutating = pod_webhook_configuration(
                MUTATING_NAME, "mpod.kb.io", base + MUTATE_POD_PATH, ca
            )
            validating = pod_webhook_configuration(
                VALIDATING_NAME, "vpod.kb.io", base + VALIDATE_POD_PATH, ca
            )
            for path, body in ((MUTATING, mutating), (VALIDATING, validating)):
                status, reply = cluster.request("POST", path, body)
                assert status == 201, reply
        self.process = process = ControllerProcess(
            kubeconfig=cluster.kubeconfig,
            config=config_file,
            log=self.log,
            metrics="0" if self.metrics_port is None else f"127.0.0.1:{self.metrics_port}",
            health_port=health,
            args=[
                "--leader-elect=false",
                "--log-format=json",
                *(["--metrics-secure=false"] if self.metrics_port is not None else []),
            ],
        )
        expected = "leader-follower" if self.followers is not None else "affinity-in-job"
        deadline = time.monotonic() + scaled(90)  # ready and in its mode, on a busy machine too
        while (mode := self.mode()) != expected or (readyz := process.probe("/readyz")) != 200:
            if process.proc.poll() is not None or time.monotonic() > deadline:
                code = process.proc.poll()
                self.__exit__(None, None, None)
                raise AssertionError(
                    f"controller not ready in mode {expected} within {scaled(90):g} s (mode "
                    f"{mode}, /readyz {readyz if mode == expected else 'not asked'}, exit code "
                    f"{code}):\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.2)
        return self

    def mode(self) -> str | None:
        """The last exclusive placement mode the controller logged."""
        found = None
        for line in self.log.read_text().splitlines():
            if '"exclusive placement mode"' in line:
                found = json.loads(line).get("mode")
        return found

    def _unregister(self) -> None:
        self.cluster.request("DELETE", f"{MUTATING}/{MUTATING_NAME}")
        self.cluster.request("DELETE", f"{VALIDATING}/{VALIDATING_NAME}")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._unregister()
        if self.process is not None:
            code = self.process.stop(60)
            self.process = None
            assert code == 0, f"controller exited {code}:\n{self.log.read_text()[-3000:]}"
