"""Building the API models' validators and serialisers before the first JobSet needs them.

Why: the models build them on first use (`types.WireModel`'s `defer_build`), which keeps a third
of this package's import off the path from process start to /readyz. Left at that, the first
reconcile or admission after every start pays the build instead (~60 ms of CPU on the 2-core
development machine, more than a whole pass over a JobSet with a hundred Jobs). The manager calls
`warm_up()` once the process is ready, so the cost lands while nothing is waiting for it.

Two samples: one sets every section of the spec and a status, so validating, checking and
dumping it reaches every model a JobSet is made of; the other sets none (and a failure policy with
nothing but a rule), so defaulting it constructs or assigns every model defaulting adds.
"""

from __future__ import annotations

from typing import Any

from jobset_controller.api.defaults import default_jobset
from jobset_controller.api.types import JobSet
from jobset_controller.api.validation import validate_create, validate_update


def _sample() -> dict[str, Any]:
    pod = {
        "metadata": {"labels": {"app": "warm-up"}, "annotations": {"a": "b"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
        },
    }
    job = {"metadata": {"labels": {"a": "b"}}, "spec": {"parallelism": 1, "template": pod}}
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "warm-up", "namespace": "default", "labels": {"a": "b"}},
        "spec": {
            "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": job},
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": job,
                    "dependsOn": [{"name": "leader", "status": "Ready"}],
                },
            ],
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["workers"]},
            "failurePolicy": {
                "maxRestarts": 1,
                "restartStrategy": "Recreate",
                "rules": [
                    {
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                        "onJobFailureMessagePatterns": ["^fatal"],
                        "targetReplicatedJobs": ["leader"],
                    }
                ],
            },
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "coordinator": {"replicatedJob": "leader"},
            "ttlSecondsAfterFinished": 60,
            "volumeClaimPolicies": [
                {"templates": [claim], "retentionPolicy": {"whenDeleted": "Delete"}}
            ],
        },
        "status": {
            "restarts": 0,
            "conditions": [
                {
                    "type": "StartupPolicyCompleted",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "reason": "AllReplicatedJobsStarted",
                    "message": "warm-up",
                }
            ],
            "replicatedJobsStatus": [
                {"name": "leader", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
                 "suspended": 0},
            ],
        },
    }  # fmt: skip


def _bare() -> dict[str, Any]:
    return {
        "metadata": {"name": "warm-up"},
        "spec": {
            "replicatedJobs": [{"name": "workers", "template": {"spec": {"template": {}}}}],
            "failurePolicy": {"rules": [{"action": "FailJobSet"}]},  # names and strategy defaulted
        },
    }


def warm_up() -> None:
    """Build what the first reconcile and the first admission would (module docstring)."""
    for sample in (_sample(), _bare()):
        js = default_jobset(JobSet.model_validate(sample))
        validate_create(js)
        validate_update(js, js)
        JobSet.model_validate(js.to_dict())
