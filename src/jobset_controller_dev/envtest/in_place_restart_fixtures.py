"""What in-place restart JobSets on the real node are made of, for the node tests
(tests/node/test_in_place_restart.py) and the bench (hack/bench/restart_bench.py) alike: the
controller's InPlaceRestart gate, the image's paths, the downward-API fields the pods read, and
the agent as a native sidecar (upstream's example)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The Configuration sections of a controller with the InPlaceRestart gate on.
IN_PLACE_RESTART_GATE: Final[Mapping[str, Any]] = {"featureGates": {"InPlaceRestart": True}}
# JobSets of a namespace (format with `namespace=`).
JOBSETS: Final = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
# The controller image's Python, which runs the workers' scripts.
PY: Final = "/opt/jobset-controller/bin/python"
# The downward-API fields of the pod's JobSet name and Job index.
NAME_FIELD: Final = "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"
INDEX_FIELD: Final = "metadata.annotations['jobset.sigs.k8s.io/job-index']"


def restart_all_on_failure() -> list[dict[str, Any]]:
    """The `restartPolicyRules` that restart all of the pod's containers on a non-zero exit."""
    return [{"action": "RestartAllContainers", "exitCodes": {"operator": "NotIn", "values": [0]}}]


def agent_sidecar(image: str) -> dict[str, Any]:
    """The in-place restart agent from `image` as a native sidecar (an init container with
    `restartPolicy: Always`): all of the pod's containers restart when it fails, and its startup
    probe holds the worker back until the barrier is down. It runs as the
    `in-place-restart-agent` ServiceAccount of manifests/in-place-restart-agent/rbac.yaml."""
    return {
        "name": "in-place-restart-agent",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["/opt/jobset-controller/bin/in-place-restart-agent"],
        "restartPolicy": "Always",
        "restartPolicyRules": restart_all_on_failure(),
        "startupProbe": {
            "httpGet": {"path": "/barrier-is-down", "port": 8081},
            "periodSeconds": 1,
            "failureThreshold": 600,
        },
        "env": [
            {"name": "JOBSET_NAME", "valueFrom": {"fieldRef": {"fieldPath": NAME_FIELD}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
    }
