"""Admission webhook configurations that send objects to a URL on 127.0.0.1, and our JobSet
webhook server served for one test namespace.

Why scoped to a namespace: the session's API server is shared by every test, and a webhook with
``failurePolicy: Fail`` would refuse other tests' JobSets once its server stops.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jobset_controller.api import FeatureGates
from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller.runtime.client import KubeClient, NotFound
from jobset_controller.runtime.servingtls import pair_context
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH, WebhookServer
from jobset_controller_dev.envtest.controlplane import ControlPlane
from jobset_controller_dev.envtest.manifests import jobset_manifest, replicated_job
from jobset_controller_dev.envtest.polling import scaled

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


JOBSET_RULE = {
    "apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "resources": ["jobsets"],
}  # fmt: skip
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
POD_SELECTOR = {"matchExpressions": [{"key": JOBSET_NAME_KEY, "operator": "Exists"}]}


def upstream_webhook_configurations(base: str, ca: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, body) of upstream's two webhook configurations, with the four webhooks
    it ships (names, paths, rules, the chart's pod objectSelector), calling `base` by URL with
    `ca`, for every namespace. Register them only on a cluster of the caller's own (the
    differential and Trainer tiers): they fail closed for every JobSet and JobSet pod."""
    bundle = base64.b64encode(ca).decode()

    def hook(name: str, path: str, rule: dict[str, Any], operations: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"url": base + path, "caBundle": bundle},
            "rules": [{**rule, "operations": operations}],
        }
        if rule is POD_RULE:
            body["objectSelector"] = POD_SELECTOR
        return body

    return [
        (MUTATING, {
            "metadata": {"name": "jobset-mutating-webhook-configuration"},
            "webhooks": [
                hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", JOBSET_RULE,
                     ["CREATE"]),
                hook("mpod.kb.io", "/mutate--v1-pod", POD_RULE, ["CREATE"]),
            ],
        }),
        (VALIDATING, {
            "metadata": {"name": "jobset-validating-webhook-configuration"},
            "webhooks": [
                hook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", JOBSET_RULE,
                     ["CREATE", "UPDATE"]),
                hook("vpod.kb.io", "/validate--v1-pod", POD_RULE, ["CREATE"]),
            ],
        }),
    ]  # fmt: skip


def _configuration(
    name: str, webhook: str, url: str, ca: bytes, rule: dict[str, Any], **selectors: Any
) -> dict[str, Any]:
    """One configuration holding one webhook: fail closed, no side effects, called by URL."""
    return {
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": webhook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
                **selectors,
                "rules": [rule],
            }
        ],
    }


def jobset_webhook_configuration(
    name: str, webhook: str, url: str, ca: bytes, namespace: str, operations: list[str]
) -> dict[str, Any]:
    """A (mutating or validating) webhook configuration body for JobSets in ``namespace``."""
    rule = {
        "apiGroups": ["jobset.x-k8s.io"],
        "apiVersions": ["v1alpha2"],
        "operations": operations,
        "resources": ["jobsets"],
    }
    return _configuration(
        name,
        webhook,
        url,
        ca,
        rule,
        namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": namespace}},
    )


def pod_webhook_configuration(name: str, webhook: str, url: str, ca: bytes) -> dict[str, Any]:
    """A (mutating or validating) pod webhook configuration as shipped: pod CREATE, only pods
    labelled with a JobSet name (objectSelector), every namespace. Register it only on a cluster
    whose JobSet pods the webhook's controller owns (a module-scoped cluster, a benchmark)."""
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pods"],
    }
    return _configuration(
        name,
        webhook,
        url,
        ca,
        rule,
        objectSelector={"matchExpressions": [{"key": JOBSET_NAME_KEY, "operator": "Exists"}]},
    )


@asynccontextmanager
async def jobset_webhooks_served(
    plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    cert_dir: Path,
    *,
    features: FeatureGates,
    validate_operations: list[str],
) -> AsyncIterator[WebhookServer]:
    """Our JobSet webhook server on 127.0.0.1 (a certificate from the control plane's CA in
    ``cert_dir``, PVC lookups through ``kube``), registered for ``namespace`` only: CREATE for the
    mutating webhook, ``validate_operations`` for the validating one. Removed on exit."""
    plane.ca.write_pair(
        cert_dir, f"webhook-{namespace}", common_name="webhook", dns_names=("localhost",),
        ip_addresses=("127.0.0.1",), server=True,
    )  # fmt: skip

    async def lookup(ns: str, name: str) -> dict[str, Any] | None:
        try:
            return await kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}")
        except NotFound:
            return None

    server = WebhookServer(
        lookup_claim=lookup,
        features=features,
        ssl_context=pair_context(cert_dir),
        host="127.0.0.1",
        port=0,
    )
    await server.start()
    base = f"https://127.0.0.1:{server.port}"
    ca = plane.ca.cert_pem
    names = (f"m-{namespace}", f"v-{namespace}")
    await kube.create(
        MUTATING,
        jobset_webhook_configuration(
            names[0], "mjobset.kb.io", base + MUTATE_PATH, ca, namespace, ["CREATE"]
        ),
    )
    await kube.create(
        VALIDATING,
        jobset_webhook_configuration(
            names[1], "vjobset.kb.io", base + VALIDATE_PATH, ca, namespace, validate_operations
        ),
    )
    try:
        await mutation_in_effect(kube, namespace)
        yield server
    finally:
        await kube.request("DELETE", f"{MUTATING}/{names[0]}")
        await kube.request("DELETE", f"{VALIDATING}/{names[1]}")
        await server.stop()


async def mutation_in_effect(kube: KubeClient, namespace: str, within: float = 30) -> None:
    """Wait until the API server calls a just-registered JobSet mutating webhook for `namespace`:
    a dry-run create comes back with its defaults. Why: the API server learns of webhook
    configurations through its own watch, so a create sent right after registering one can pass
    without it (a JobSet created without successPolicy, seen on a loaded machine)."""
    probe = jobset_manifest(
        "webhook-probe", replicated_jobs=[replicated_job("w", restart_policy=None)]
    )
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    deadline = time.monotonic() + scaled(within)
    while True:
        answer = await kube.create(path, probe, dryRun="All")
        if "successPolicy" in answer.get("spec", {}):
            return
        assert time.monotonic() < deadline, (
            f"the mutating webhook not called within {scaled(within):g} s: {answer.get('spec')}"
        )
        await asyncio.sleep(0.05)  # poll interval of the wait for the condition above
