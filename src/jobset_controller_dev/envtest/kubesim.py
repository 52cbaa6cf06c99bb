"""Plays the parts of Kubernetes that an etcd + apiserver control plane lacks.

Integration tests run no kube-controller-manager, so nobody writes Job status and nobody removes
the foreground-deletion finalizer of deleted Jobs. `KubeSim` does both on request, with status
bodies that pass the apiserver's Job status validation (e.g. Complete needs SuccessCriteriaMet).
"""

from __future__ import annotations

import datetime
from typing import Any

from jobset_controller.runtime.client import KubeClient


class KubeSim:
    """Plays the parts of Kubernetes that integration tests lack (no controller-manager).

    It writes Job status as the Job controller would, and removes the foreground-deletion
    finalizer of deleted Jobs as the garbage collector would once their pods were gone.
    """

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    def job_path(self, name: str) -> str:
        return f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}"

    async def jobs(self) -> list[dict[str, Any]]:
        body = await self.kube.get(f"/apis/batch/v1/namespaces/{self.namespace}/jobs")
        return sorted(body.get("items") or [], key=lambda j: j["metadata"]["name"])

    async def set_status(self, name: str, status: dict[str, Any]) -> None:
        await self.kube.merge_patch(self.job_path(name) + "/status", {"status": status})

    async def start(self, name: str, *, ready: int = 1) -> None:
        await self.set_status(name, {"startTime": _now(), "active": ready, "ready": ready})

    async def complete(self, name: str) -> None:
        job = await self.kube.get(self.job_path(name))
        completions = job["spec"].get("completions") or 1
        now = _now()
        await self.set_status(
            name,
            {
                "startTime": job.get("status", {}).get("startTime") or now,
                "active": 0,
                "ready": 0,
                "succeeded": completions,
                "completionTime": now,
                "completedIndexes": ",".join(str(i) for i in range(completions))
                if job["spec"].get("completionMode") == "Indexed"
                else None,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "lastTransitionTime": now},
                ],
            },
        )

    async def fail(
        self,
        name: str,
        reason: str = "BackoffLimitExceeded",
        message: str = "Job has reached the specified backoff limit",
    ) -> None:
        now = _now()
        condition = {
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        await self.set_status(
            name,
            {
                "startTime": now,
                "active": 0,
                "ready": 0,
                "failed": 1,
                "conditions": [
                    {"type": "FailureTarget", **condition},
                    {"type": "Failed", **condition},
                ],
            },
        )

    async def collect_garbage(self) -> int:
        """Let deleted Jobs go: drop the finalizers of every Job being deleted."""
        removed = 0
        for job in await self.jobs():
            if job["metadata"].get("deletionTimestamp"):
                await self.kube.merge_patch(
                    self.job_path(job["metadata"]["name"]), {"metadata": {"finalizers": None}}
                )
                removed += 1
        return removed


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
