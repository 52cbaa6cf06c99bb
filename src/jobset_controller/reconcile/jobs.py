"""Read-only accessors for child Jobs, which reconcile receives as raw (possibly trimmed) dicts.

Why raw dicts: parsing thousands of Jobs into models on every pass costs more than reading the
handful of fields reconcile needs. Every accessor tolerates a missing or null field and answers
with the value the API server would default it to, so a trimmed Job never crashes a pass.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeAlias, TypeGuard

Job: TypeAlias = Mapping[str, Any]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, answered without the ABC machinery for plain dicts (what
    the informer caches): these accessors run dozens of times per Job per pass, and the ABC check
    was a fifth of a steady pass."""
    return type(value) is dict or isinstance(value, Mapping)


def _section(job: Job, key: str) -> Mapping[str, Any]:
    value = job.get(key)
    return value if _is_mapping(value) else _EMPTY


def metadata_of(job: Job) -> Mapping[str, Any]:
    """``metadata``, or an empty mapping."""
    return _section(job, "metadata")


def spec_of(job: Job) -> Mapping[str, Any]:
    """``spec``, or an empty mapping."""
    return _section(job, "spec")


def status_of(job: Job) -> Mapping[str, Any]:
    """``status``, or an empty mapping."""
    return _section(job, "status")


def name_of(job: Job) -> str:
    """``metadata.name`` ("" when missing)."""
    return str(metadata_of(job).get("name") or "")


def uid_of(job: Job) -> str:
    """``metadata.uid`` ("" when missing)."""
    return str(metadata_of(job).get("uid") or "")


def resource_version_of(job: Job) -> str:
    """``metadata.resourceVersion`` ("" when missing)."""
    return str(metadata_of(job).get("resourceVersion") or "")


def labels_of(job: Job) -> Mapping[str, str]:
    """``metadata.labels``, or an empty mapping."""
    labels = metadata_of(job).get("labels")
    return labels if _is_mapping(labels) else _EMPTY


def is_being_deleted(job: Job) -> bool:
    """The Job has a ``deletionTimestamp``: it is going away and is not deleted again."""
    return bool(metadata_of(job).get("deletionTimestamp"))


def is_suspended(job: Job) -> bool:
    """The child Job's ``spec.suspend == true`` (a JobSet's: ``view.jobset_is_suspended``)."""
    return spec_of(job).get("suspend") is True


def pod_template_of(job: Job) -> Mapping[str, Any]:
    """``spec.template``, or an empty mapping."""
    return _section(spec_of(job), "template")


def status_count(job: Job, key: str) -> int:
    """An integer counter of ``status`` (active, ready, succeeded, failed); 0 when unset."""
    value = status_of(job).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def optional_int(mapping: Mapping[str, Any], key: str) -> int | None:
    """An optional integer field (parallelism, completions), None when unset or not an int."""
    value = mapping.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def true_condition(job: Job, condition_type: str) -> Mapping[str, Any] | None:
    """The Job's condition of that type when its status is True, else None."""
    conditions = status_of(job).get("conditions")
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if (
            _is_mapping(condition)
            and condition.get("type") == condition_type
            and condition.get("status") == "True"
        ):
            return condition
    return None


def has_start_time(job: Job) -> bool:
    """``status.startTime`` is set (the Job controller has started the Job)."""
    return bool(status_of(job).get("startTime"))
