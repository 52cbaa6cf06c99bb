"""Names the controller generates, shared by validation and the reconciler.

See docs/behaviour.md#names.

Why one module: admission rejects a JobSet whose generated names would be invalid, so the webhook
must compute exactly the names the reconciler will later create. Both import them from here.

All functions are pure. ``name_for_validation`` replaces the API server's random name suffix with
a fixed placeholder of the same length, so validation stays deterministic.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from jobset_controller.api.types import Coordinator, JobSet, Network, ObjectMeta

# The API server's name generator: prefix cut to 63 - 5 characters, then 5 random characters.
_GENERATED_SUFFIX_LENGTH: Final = 5
_MAX_GENERATE_NAME_PREFIX: Final = 63 - _GENERATED_SUFFIX_LENGTH
# Stands in for a random suffix (the generator's and the Job controller's pod-name suffix alike).
RANDOM_SUFFIX_PLACEHOLDER: Final = "abcde"


def job_name(jobset_name: str, replicated_job_name: str, job_index: int) -> str:
    """Name of a child Job: ``<jobset>-<replicatedJob>-<jobIndex>``."""
    return f"{jobset_name}-{replicated_job_name}-{job_index}"


def pod_hostname(jobset_name: str, replicated_job_name: str, job_index: int, pod_index: int) -> str:
    """Hostname the Job controller gives an Indexed pod: ``<js>-<rjob>-<jobIdx>-<podIdx>``."""
    return f"{job_name(jobset_name, replicated_job_name, job_index)}-{pod_index}"


def subdomain(jobset_name: str, network: Network | None) -> str:
    """Subdomain (and headless Service name): ``network.subdomain``, else the JobSet name."""
    if network is not None and network.subdomain:
        return network.subdomain
    return jobset_name


def jobset_subdomain(js: JobSet) -> str:
    """The subdomain of a stored JobSet (its name is known once it is stored)."""
    return subdomain(js.metadata.name or "", js.spec.network)


def coordinator_endpoint(jobset_name: str, coordinator: Coordinator, subdomain_name: str) -> str:
    """Stable DNS name of the coordinator pod: ``<js>-<rjob>-<jobIdx>-<podIdx>.<subdomain>``."""
    hostname = pod_hostname(
        jobset_name, coordinator.replicated_job, coordinator.job_index, coordinator.pod_index
    )
    return f"{hostname}.{subdomain_name}"


def jobset_coordinator_endpoint(js: JobSet) -> str | None:
    """The coordinator label value of a stored JobSet, or None when it has no coordinator."""
    if js.spec.coordinator is None:
        return None
    name = js.metadata.name or ""
    return coordinator_endpoint(name, js.spec.coordinator, subdomain(name, js.spec.network))


def pvc_name(template_name: str, jobset_name: str) -> str:
    """Name of the PVC created from a volumeClaimPolicies template: ``<template>-<jobset>``."""
    return f"{template_name}-{jobset_name}"


def job_key(namespace: str, name: str) -> str:
    """Value of the job-key label: SHA-1 hex of ``<namespace>/<jobName>`` (not SHA-256)."""
    return hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()


def name_for_validation(metadata: ObjectMeta) -> str:
    """The JobSet name admission checks derived names with.

    ``metadata.name`` when set; otherwise what the API server would generate from
    ``generateName`` (prefix cut to 58 characters plus a 5-character suffix, here a fixed
    placeholder); otherwise the empty string.
    """
    if metadata.name:
        return metadata.name
    if metadata.generate_name:
        return metadata.generate_name[:_MAX_GENERATE_NAME_PREFIX] + RANDOM_SUFFIX_PLACEHOLDER
    return ""
