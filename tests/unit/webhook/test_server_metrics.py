"""The webhook server measures its requests under controller-runtime's webhook metric names."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry

from jobset_controller.api import FeatureGates
from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH, WebhookServer


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_requests_latency_and_in_flight_are_labelled_by_webhook_path_and_code(
    tmp_path: Path,
) -> None:
    cert, key = self_signed_pem()
    (tmp_path / CERT_FILE).write_bytes(cert)
    (tmp_path / KEY_FILE).write_bytes(key)
    registry = CollectorRegistry()
    server = WebhookServer(
        lookup_claim=None,
        features=FeatureGates(),
        ssl_context=pair_context(tmp_path),
        host="127.0.0.1",
        port=0,
        registry=registry,
    )
    for path in (MUTATE_PATH, VALIDATE_PATH):  # present before the first request
        assert (
            registry.get_sample_value(
                "controller_runtime_webhook_requests_in_flight", {"webhook": path}
            )
            == 0
        )
    await server.start()
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "1", "operation": "DELETE"},
    }
    base = f"https://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(2):
                async with http.post(base + MUTATE_PATH, json=review, ssl=False) as answer:
                    assert answer.status == 200
            async with http.post(base + VALIDATE_PATH, data=b"not json", ssl=False) as answer:
                assert answer.status == 400
            async with http.post(base + "/elsewhere", data=b"{}", ssl=False) as answer:
                assert answer.status == 404
    finally:
        await server.stop()

    requests = "controller_runtime_webhook_requests_total"
    assert sample(registry, requests, webhook=MUTATE_PATH, code="200") == 2
    assert sample(registry, requests, webhook=VALIDATE_PATH, code="400") == 1
    assert sample(registry, requests, webhook="/elsewhere", code="404") == 0
    latency = "controller_runtime_webhook_latency_seconds_count"
    assert sample(registry, latency, webhook=MUTATE_PATH) == 2
    assert sample(registry, latency, webhook=VALIDATE_PATH) == 1
    in_flight = "controller_runtime_webhook_requests_in_flight"
    assert sample(registry, in_flight, webhook=MUTATE_PATH) == 0
