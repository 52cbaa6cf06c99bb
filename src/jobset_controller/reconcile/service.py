"""The headless Service that gives the JobSet's pods stable DNS names (docs/behaviour.md#network).

Only with DNS hostnames enabled. It is named after the subdomain, selects every pod of the JobSet
and publishes not-ready addresses by default, so peers resolve each other before readiness. An
existing Service of that name is left as it is: never adopted, never updated.
"""

from collections.abc import Mapping
from typing import Any

from jobset_controller.api import JOBSET_NAME_KEY, JobSet
from jobset_controller.api.naming import jobset_subdomain
from jobset_controller.reconcile.desired_jobs import dns_hostnames_enabled
from jobset_controller.reconcile.ownership import controller_reference


def headless_service(js: JobSet) -> dict[str, Any]:
    """The Service manifest: ``clusterIP: None``, no ports, no labels, owned by the JobSet."""
    network = js.spec.network
    publish = network is None or network.publish_not_ready_addresses is not False
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": jobset_subdomain(js),
            "namespace": js.metadata.namespace or "",
            "ownerReferences": [controller_reference(js)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOBSET_NAME_KEY: js.metadata.name or ""},
            "publishNotReadyAddresses": publish,
        },
    }


def service_to_create(js: JobSet, existing: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The Service to create: needed (DNS hostnames on) and missing; else None."""
    if not dns_hostnames_enabled(js) or existing is not None:
        return None
    return headless_service(js)
