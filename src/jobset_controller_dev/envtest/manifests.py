"""JobSet manifests for tests and benches: one builder instead of a copy per file.

`replicated_job` builds one entry of `spec.replicatedJobs`; `jobset_manifest` wraps them in a
JobSet. Fields left as None are omitted, so each caller sends exactly the fields it asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

API_VERSION = "jobset.x-k8s.io/v1alpha2"


def container(
    name: str = "main",
    image: str = "busybox",
    *,
    volume_mounts: Iterable[Mapping[str, Any]] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One container; extra fields (e.g. ``resources``) are added as given."""
    body: dict[str, Any] = {"name": name, "image": image, **fields}
    if volume_mounts is not None:
        body["volumeMounts"] = [dict(m) for m in volume_mounts]
    return body


def replicated_job(
    name: str,
    replicas: int | None = None,
    *,
    pods: int | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    backoff_limit: int | None = None,
    restart_policy: str | None = "Never",
    containers: Iterable[Mapping[str, Any]] | None = None,
    volume_mounts: Iterable[Mapping[str, Any]] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    pod_spec: Mapping[str, Any] | None = None,
    job_spec: Mapping[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One replicated Job.

    ``pods`` sets both parallelism and completions. ``annotations``/``labels`` go on the pod
    template's metadata. ``containers`` defaults to one ``main`` busybox container (with
    ``volume_mounts`` if given). ``pod_spec`` adds pod spec fields, ``job_spec`` Job spec fields
    (e.g. ``completionMode``); ``fields`` add fields to the replicated Job itself (e.g.
    ``dependsOn``).
    """
    if pods is not None:
        parallelism = parallelism if parallelism is not None else pods
        completions = completions if completions is not None else pods
    if containers is None:
        containers = [container(volume_mounts=volume_mounts)]
    pod: dict[str, Any] = {}
    if restart_policy is not None:
        pod["restartPolicy"] = restart_policy
    pod["containers"] = [dict(c) for c in containers]
    pod.update(pod_spec or {})
    template: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if metadata:
        template["metadata"] = metadata
    template["spec"] = pod
    job: dict[str, Any] = {}
    if parallelism is not None:
        job["parallelism"] = parallelism
    if completions is not None:
        job["completions"] = completions
    if backoff_limit is not None:
        job["backoffLimit"] = backoff_limit
    job.update(job_spec or {})
    job["template"] = template
    body: dict[str, Any] = {"name": name}
    if replicas is not None:
        body["replicas"] = replicas
    body.update(fields)
    body["template"] = {"spec": job}
    return body


def jobset_manifest(
    name: str,
    *,
    replicated_jobs: Iterable[Mapping[str, Any]],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A JobSet named ``name``; ``spec`` adds spec fields (e.g. ``failurePolicy``, ``suspend``)."""
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": [dict(r) for r in replicated_jobs], **spec},
    }
