"""What broke a run, in words an operator can act on (docs/behaviour.md#restart-timeline).

Upstream names only the first failed Job in its restart and failure messages; users then search
pods, nodes and logs for the rest (kubernetes-sigs/jobset#461, kubernetes-sigs/kueue#7783). The
message of RestartingJobSet=True and of Failed=True (and the Events that carry the same text)
here continue after upstream's words, when the pod cache holds the first pod of that Job that
failed, with the Job's failure reason, that pod, its node, and the container that exited first
with its exit code and reason::

    applying RestartJobSet failure policy action (first failed job: js-w-1): BackoffLimitExceeded,
    pod js-w-1-0-x7k2p on node n-12, container trainer exited with code 137 (OOMKilled)

Upstream's text stays a prefix, so whatever matches on it still matches. The addition is bounded
(``MAX_DETAIL`` characters). Which pod failed first: among the Job's failed pods, those the Job
controller did not delete itself (a pod it terminates after the Job has failed ends Failed too),
the one whose failing container finished first; without a failing container, the pod's own
reason and message (an eviction, a node shutdown). The pod cache may see a pod's end after the
Job's condition: a pass that sees the Job fail before any failed pod of it writes upstream's
message word for word, as it does for a Job that failed without a failed pod (its own
activeDeadlineSeconds, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jobset_controller.api.placement import node_name
from jobset_controller.api.pod_status import (
    Pod,
    controller_uid,
    failing_container,
    is_failed,
    is_terminating,
)

MAX_DETAIL: Final = 512


@dataclass(frozen=True)
class FirstFailure:
    """The failed Job's reason, and the pod that failed it when known."""

    reason: str
    pod: str = ""
    node: str = ""
    container: str = ""
    exit_code: int | None = None
    container_reason: str = ""
    pod_reason: str = ""
    pod_message: str = ""

    def describe(self) -> str:
        """The words added to upstream's message; '' when no failed pod is known (the message
        is then upstream's, word for word)."""
        if not self.pod:
            return ""
        parts = [self.reason] if self.reason else []
        if self.pod:
            where = f"pod {self.pod}" + (f" on node {self.node}" if self.node else "")
            parts.append(where)
        if self.container and self.exit_code is not None:
            end = f"container {self.container} exited with code {self.exit_code}"
            parts.append(end + (f" ({self.container_reason})" if self.container_reason else ""))
        elif self.pod_reason or self.pod_message:
            parts.append(": ".join(part for part in (self.pod_reason, self.pod_message) if part))
        text = ", ".join(parts)
        return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def first_failure(job_uid: str, reason: str, pods: Sequence[Pod]) -> FirstFailure:
    """The first failure of the Job ``job_uid`` whose failure condition says ``reason``, from the
    JobSet's failed pods ``pods`` (any Job's; trimmed by ``api.pod_status.end_facts``)."""
    own = [pod for pod in pods if is_failed(pod) and controller_uid(pod) == job_uid]
    if not own:
        return FirstFailure(reason)
    pod = min(own, key=_order)
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    container = failing_container(pod)
    return FirstFailure(
        reason,
        pod=str(meta.get("name") or ""),
        node=node_name(pod) or "",
        container="" if container is None else container.name,
        exit_code=None if container is None else container.exit_code,
        container_reason="" if container is None else container.reason,
        pod_reason=str(status.get("reason") or ""),
        pod_message=str(status.get("message") or ""),
    )


def _order(pod: Pod) -> tuple[bool, bool, str, str]:
    """Failed on its own before terminated by the Job controller; a failing container before
    none; the earliest end; then the name, so the choice never depends on the cache's order."""
    container = failing_container(pod)
    finished = "" if container is None else container.finished_at
    name = str((pod.get("metadata") or {}).get("name") or "")
    return (is_terminating(pod), container is None, finished or "~", name)


def with_detail(message: str, failure: FirstFailure | None) -> str:
    """``message`` continued with the failure's description (unchanged without one)."""
    detail = "" if failure is None else failure.describe()
    return f"{message}: {detail}" if detail else message
