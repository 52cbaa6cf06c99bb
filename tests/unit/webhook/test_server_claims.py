"""A JobSet review reads existing claims only when their answer matters: a well-formed CREATE.

Any pod can POST reviews to the webhook port (it has no authentication of its own), and each
claim lookup is a request to the API server: an UPDATE, a DELETE or a malformed review costs
none, and a CREATE one per claim template (the manager's lookup answers claims its cache does not
hold without a request: tests/unit/manager/test_claim_lookup.py).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem
from jobset_controller.webhook.server import VALIDATE_PATH, WebhookServer


def jobset(templates: int) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ns"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "c", "image": "x"}],
                                }
                            }
                        }
                    },
                }
            ],
            "volumeClaimPolicies": [
                {
                    "templates": [
                        {"metadata": {"name": f"data-{index}"}, "spec": {}}
                        for index in range(templates)
                    ]
                }
            ],
        },
    }


def review(operation: str, obj: Any) -> bytes:
    request: dict[str, Any] = {"uid": "u", "operation": operation, "namespace": "ns", "name": "js"}
    request |= {"object": obj, "oldObject": obj if operation == "UPDATE" else None}
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, list[str]]]:
    """(the server's URL, the claims it looked up)."""
    looked_up: list[str] = []

    async def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        looked_up.append(f"{namespace}/{name}")
        return None

    cert, key = self_signed_pem()
    (tmp_path / CERT_FILE).write_bytes(cert)
    (tmp_path / KEY_FILE).write_bytes(key)
    context: ssl.SSLContext = pair_context(tmp_path)
    server = WebhookServer(
        lookup_claim=lookup,
        features=FeatureGates(),
        ssl_context=context,
        host="127.0.0.1",
        port=0,
    )
    await server.start()
    try:
        yield f"https://127.0.0.1:{server.port}", looked_up
    finally:
        await server.stop()


async def post(url: str, body: bytes) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + VALIDATE_PATH, data=body, ssl=False) as answer,
    ):
        await answer.read()
        return answer.status


async def test_a_create_looks_up_each_claim_template_once(
    served: tuple[str, list[str]],
) -> None:
    url, looked_up = served
    assert await post(url, review("CREATE", jobset(3))) == 200
    assert looked_up == ["ns/data-0-js", "ns/data-1-js", "ns/data-2-js"]


async def test_a_create_without_claim_policies_looks_up_no_claim(
    served: tuple[str, list[str]],
) -> None:
    url, looked_up = served
    without = jobset(0)
    del without["spec"]["volumeClaimPolicies"]
    assert await post(url, review("CREATE", without)) == 200
    assert await post(url, review("CREATE", jobset(0))) == 200
    assert looked_up == []


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
async def test_other_operations_look_up_no_claim(
    served: tuple[str, list[str]], operation: str
) -> None:
    url, looked_up = served
    assert await post(url, review(operation, jobset(50))) == 200
    assert looked_up == []


async def test_a_malformed_review_looks_up_no_claim(served: tuple[str, list[str]]) -> None:
    url, looked_up = served
    assert await post(url, b'{"request": "x"}') == 400
    assert looked_up == []
