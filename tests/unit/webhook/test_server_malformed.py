"""A malformed AdmissionReview is a 400 that names the problem, on every webhook path, never a 500.

The API server always sends a well-formed review; anything else comes from another client, and
the server's docstring promises it a 400. Each body below once reached a decision that read it
as a dict and raised (a 500 through the HTTP server's handler guard).
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
from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_LABEL
from jobset_controller.runtime.certs import CERT_FILE, KEY_FILE
from jobset_controller.runtime.servingtls import pair_context, self_signed_pem
from jobset_controller.webhook.pods import MUTATE_POD_PATH, VALIDATE_POD_PATH, Lookups
from jobset_controller.webhook.server import MUTATE_PATH, VALIDATE_PATH, WebhookServer

PATHS = (MUTATE_PATH, VALIDATE_PATH, MUTATE_POD_PATH, VALIDATE_POD_PATH)


def envelope(request: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def context_for(tmp_path: Path) -> ssl.SSLContext:
    cert, key = self_signed_pem()
    (tmp_path / CERT_FILE).write_bytes(cert)
    (tmp_path / KEY_FILE).write_bytes(key)
    return pair_context(tmp_path)


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a webhook server with the pod webhooks on (empty caches)."""
    server = WebhookServer(
        lookup_claim=None,
        features=FeatureGates(),
        ssl_context=context_for(tmp_path),
        host="127.0.0.1",
        port=0,
        pod_lookups=Lookups(leaders=lambda namespace, name: (), node_labels=lambda node: None),
    )
    await server.start()
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        await server.stop()


async def post(base: str, path: str, body: bytes) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + path, data=body, ssl=False) as answer,
    ):
        return answer.status, await answer.text()


MALFORMED: list[tuple[str, Any, str]] = [
    ("array body", [], "expected an AdmissionReview object, got an array"),
    ("string body", "x", "expected an AdmissionReview object, got a string"),
    ("number body", 7, "expected an AdmissionReview object, got a number"),
    ("null body", None, "expected an AdmissionReview object, got null"),
    ("no request", {"kind": "AdmissionReview"}, "with a request object, got null"),
    ("string request", {"request": "x"}, "with a request object, got a string"),
    ("array request", {"request": []}, "with a request object, got an array"),
    ("empty array request", envelope([]), "with a request object, got an array"),
    ("number uid", envelope({"uid": 1, "operation": "CREATE"}), "request.uid must be a string"),
    ("array operation", envelope({"operation": ["CREATE"]}), "request.operation must be a string"),
    (
        "object namespace",
        envelope({"operation": "CREATE", "namespace": {}, "object": {}}),
        "request.namespace must be a string",
    ),
    (
        "array object",
        envelope({"operation": "CREATE", "object": []}),
        "request.object must be an object, got an array",
    ),
    (
        "string oldObject",
        envelope({"operation": "UPDATE", "object": {}, "oldObject": "x"}),
        "request.oldObject must be an object, got a string",
    ),
    (
        "array metadata",
        envelope({"operation": "CREATE", "object": {"metadata": []}}),
        "request.object.metadata must be an object",
    ),
    (
        "string spec",
        envelope({"operation": "CREATE", "object": {"spec": "x"}}),
        "request.object.spec must be an object",
    ),
    (
        "array labels",
        envelope({"operation": "CREATE", "object": {"metadata": {"labels": []}}}),
        "request.object.metadata.labels must be an object",
    ),
    (
        "string annotations",
        envelope({"operation": "CREATE", "object": {"metadata": {"annotations": "x"}}}),
        "request.object.metadata.annotations must be an object",
    ),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("body", "message"),
    [pytest.param(body, message, id=case) for case, body, message in MALFORMED],
)
async def test_a_malformed_review_is_a_400_naming_the_problem(
    base: str, path: str, body: Any, message: str
) -> None:
    status, text = await post(base, path, orjson.dumps(body))
    assert (status, message in text) == (400, True), text


@pytest.mark.parametrize("path", PATHS)
async def test_a_body_that_is_not_json_is_a_400(base: str, path: str) -> None:
    assert await post(base, path, b"{not json") == (
        400,
        "expected an AdmissionReview: the body is not JSON",
    )


@pytest.mark.parametrize(("path", "expected"), [(MUTATE_POD_PATH, 400), (VALIDATE_POD_PATH, 400)])
async def test_a_pod_with_wrongly_typed_deeper_fields_is_a_400_where_read(
    base: str, path: str, expected: int
) -> None:
    """A leader whose affinity is an array: the envelope is right, but neither decision can read
    the pod (both read its affinity to tell a fallback Job's pods from the others)."""
    pod = {
        "metadata": {
            "name": "js-w-0-1-abcde",
            "labels": {
                PLACEMENT_LABEL: LEADER_FOLLOWER,
                "jobset.sigs.k8s.io/jobset-name": "js",
            },
            "annotations": {
                "jobset.sigs.k8s.io/jobset-name": "js",
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "spec": {"affinity": ["x"], "nodeSelector": ["x"]},
    }
    review = envelope({"uid": "u", "operation": "CREATE", "namespace": "ns", "object": pod})
    status, text = await post(base, path, orjson.dumps(review))
    assert status == expected, text
    if expected == 400:
        assert text.startswith("cannot read the pod: ")


@pytest.mark.parametrize("path", PATHS)
async def test_a_well_formed_review_is_answered_with_its_uid(base: str, path: str) -> None:
    review = envelope({"uid": "u-1", "operation": "DELETE", "namespace": "ns", "object": None})
    status, text = await post(base, path, orjson.dumps(review))
    assert status == 200
    answer = orjson.loads(text)
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"] == {"uid": "u-1", "allowed": True}
