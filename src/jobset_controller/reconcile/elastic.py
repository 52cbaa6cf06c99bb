"""Elastic JobSets: propagate changed parallelism/completions to the Jobs.

See docs/behaviour.md#elastic.

Behind the ElasticJobSet gate, admission lets a live JobSet change ``parallelism`` and
``completions`` of an Indexed replicatedJob (kept equal, at least 1). Every active Job whose
values differ from its template's is patched to them. ``replicas`` stays immutable.

Deliberate difference: upstream also "propagates" a template with both values unset (nil equals
nil), which would patch the API server's defaults away on every pass; only set, equal values are
propagated here. Jobs being deleted are left alone.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from jobset_controller.api import REPLICATED_JOB_NAME_KEY, ReplicatedJob
from jobset_controller.reconcile.jobs import (
    Job,
    is_being_deleted,
    labels_of,
    name_of,
    optional_int,
    spec_of,
)


def elastic_patch(job: Job, rjob: ReplicatedJob) -> dict[str, Any] | None:
    """The merge patch bringing ``job`` to its template's parallelism/completions, or None."""
    parallelism = rjob.template.spec.parallelism
    completions = rjob.template.spec.completions
    if parallelism is None or parallelism != completions:
        return None
    spec = spec_of(job)
    if optional_int(spec, "parallelism") == parallelism and (
        optional_int(spec, "completions") == completions
    ):
        return None
    return {"spec": {"parallelism": parallelism, "completions": completions}}


def elastic_patches(
    rjobs: Sequence[ReplicatedJob], active: Sequence[Job]
) -> Mapping[str, dict[str, Any]]:
    """Patches by Job name for the active Jobs whose sizes lag behind their template."""
    by_name = {rjob.name: rjob for rjob in rjobs}
    out: dict[str, dict[str, Any]] = {}
    for job in active:
        rjob = by_name.get(labels_of(job).get(REPLICATED_JOB_NAME_KEY, ""))
        if rjob is None or is_being_deleted(job):
            continue
        patch = elastic_patch(job, rjob)
        if patch is not None:
            out[name_of(job)] = patch
    return out
