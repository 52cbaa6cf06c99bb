"""Admission webhook configurations that send one test namespace's JobSets to a URL on 127.0.0.1.

Why scoped to a namespace: the session's API server is shared by every test, and a webhook with
``failurePolicy: Fail`` would refuse other tests' JobSets once its server stops.
"""

from __future__ import annotations

import base64
from typing import Any

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def jobset_webhook_configuration(
    name: str, webhook: str, url: str, ca: bytes, namespace: str, operations: list[str]
) -> dict[str, Any]:
    """A (mutating or validating) webhook configuration body for JobSets in ``namespace``."""
    return {
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": webhook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "rules": [
                    {
                        "apiGroups": ["jobset.x-k8s.io"],
                        "apiVersions": ["v1alpha2"],
                        "operations": operations,
                        "resources": ["jobsets"],
                    }
                ],
            }
        ],
    }


def pod_webhook_configuration(name: str, webhook: str, url: str, ca: bytes) -> dict[str, Any]:
    """A (mutating or validating) pod webhook configuration as shipped: pod CREATE, only pods
    labelled with a JobSet name (objectSelector), every namespace. Register it only on a cluster
    whose JobSet pods the webhook's controller owns (a module-scoped cluster, a benchmark)."""
    return {
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": webhook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
                "objectSelector": {
                    "matchExpressions": [
                        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}
                    ]
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    }
