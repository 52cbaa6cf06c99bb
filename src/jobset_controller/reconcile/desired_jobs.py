"""The complete manifest of a child Job, built from its replicatedJob's template.

See docs/behaviour.md#child-labels.

The Job starts as a copy of the replicatedJob's Job template (its metadata contributes labels and
annotations only), then the controller:

1. writes the JobSet label/annotation set on the Job and on its pod template, plus the
   exclusive-placement annotations (``labels``) and, with its gate, the execution attempt;
2. sets the pod template's ``subdomain`` when DNS hostnames are enabled (the headless Service
   has that name);
3. applies the exclusive-placement strategy (``placement``): with the pod webhooks active, the
   leader/follower label instead of affinity in the template;
4. sets ``spec.suspend`` to the JobSet's suspend value, whatever the template says;
5. adds a volume for every volume-claim template the pods mount (``volumes``);
6. adds the controller ownerReference.
"""

from collections.abc import Mapping
from typing import Any

import orjson

from jobset_controller.api import (
    EXCLUSIVE_KEY,
    EXECUTION_ATTEMPT_KEY,
    JOB_KEY,
    JobSet,
    ReplicatedJob,
)
from jobset_controller.api.naming import job_name, jobset_subdomain
from jobset_controller.api.placement import LEADER_FOLLOWER, PLACEMENT_LABEL
from jobset_controller.reconcile.labels import child_labels, exclusive_annotations
from jobset_controller.reconcile.ownership import controller_reference
from jobset_controller.reconcile.placement import (
    uses_affinity_strategy,
    uses_node_selector_strategy,
    with_exclusive_affinity,
    with_node_selector_strategy,
)
from jobset_controller.reconcile.view import jobset_is_suspended
from jobset_controller.reconcile.volumes import with_claim_volumes


def dns_hostnames_enabled(js: JobSet) -> bool:
    """``spec.network.enableDNSHostnames`` is true (nil reads as false, as upstream)."""
    network = js.spec.network
    return network is not None and network.enable_dns_hostnames is True


def construct_job(
    js: JobSet,
    rjob: ReplicatedJob,
    job_index: int,
    *,
    restarts: int,
    job_restart_attempt: int | None,
    pod_webhooks: bool = False,
    template: Mapping[str, Any] | None = None,
    execution_attempt: str | None = None,
) -> dict[str, Any]:
    """The manifest of Job ``job_index`` of ``rjob``.

    Args:
        js: The (defaulted) JobSet.
        rjob: The replicatedJob, one of ``js.spec.replicated_jobs``.
        job_index: 0 .. replicas-1.
        restarts: ``status.restarts`` now, recorded in the restart-attempt label.
        job_restart_attempt: RestartJob gate: this index's ``jobRestarts`` value; else None.
        pod_webhooks: The pod webhooks are active: an affinity-strategy Job is placed by leader
            and followers (labelled, no affinity in its template).
        template: ``rjob.template.to_dict()``, when the caller builds many Jobs of one
            replicatedJob (dumping the model once per replicatedJob, not once per Job).
        execution_attempt: ExecutionAttemptsTracking gate: the ``execution-attempt``
            annotation of the Job and its pod template; None writes none.
    """
    namespace = js.metadata.namespace or ""
    name = job_name(js.metadata.name or "", rjob.name, job_index)
    keys = child_labels(
        js, rjob, job_index, restarts=restarts, job_restart_attempt=job_restart_attempt
    )
    exclusive = exclusive_annotations(js, rjob)
    if execution_attempt is not None:
        exclusive = {**exclusive, EXECUTION_ATTEMPT_KEY: execution_attempt}
    if template is None:
        template = rjob.template.to_dict()
    template_metadata = template.get("metadata") or {}
    job_annotations = {**(template_metadata.get("annotations") or {}), **keys, **exclusive}
    # Each Job gets its own copy (no two manifests share a nested object), made through JSON:
    # the template is JSON already, and orjson copies it several times faster than deepcopy.
    spec: dict[str, Any] = orjson.loads(orjson.dumps(template.get("spec") or {}))
    pod_template: dict[str, Any] = spec.get("template") or {}
    pod_metadata = dict(pod_template.get("metadata") or {})
    pod_metadata["labels"] = {**(pod_metadata.get("labels") or {}), **keys}
    pod_annotations = {**(pod_metadata.get("annotations") or {}), **keys, **exclusive}
    pod_metadata["annotations"] = pod_annotations
    pod_spec: dict[str, Any] = dict(pod_template.get("spec") or {})
    if dns_hostnames_enabled(js):
        pod_spec["subdomain"] = jobset_subdomain(js)
    if uses_node_selector_strategy(job_annotations):
        pod_spec = with_node_selector_strategy(pod_spec, namespace, name)
    if uses_affinity_strategy(pod_annotations):
        if pod_webhooks:
            pod_metadata["labels"][PLACEMENT_LABEL] = LEADER_FOLLOWER
        else:
            pod_spec = with_exclusive_affinity(
                pod_spec, keys[JOB_KEY], pod_annotations[EXCLUSIVE_KEY]
            )
    pod_spec = with_claim_volumes(pod_spec, js)
    spec["template"] = {**pod_template, "metadata": pod_metadata, "spec": pod_spec}
    spec["suspend"] = jobset_is_suspended(js)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(template_metadata.get("labels") or {}), **keys},
            "annotations": job_annotations,
            "ownerReferences": [controller_reference(js)],
        },
        "spec": spec,
    }
