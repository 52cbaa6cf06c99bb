"""Exclusive placement: one child Job per topology domain (docs/behaviour.md#exclusive-placement).

A JobSet asks for it with the ``alpha.jobset.sigs.k8s.io/exclusive-topology: <node label key>``
annotation. Two strategies put the Job's pods into a domain of their own:

* **node-selector strategy** (the ``alpha.jobset.sigs.k8s.io/node-selector`` annotation too, on
  the Job): the pods select nodes labelled ``namespaced-job=<ns>_<jobName>`` and tolerate the
  ``no-schedule`` taint. The user labels and taints the nodes beforehand.
* **affinity strategy** (the default): upstream's pod webhook gives the leader pod a required pod
  affinity to its own Job and a required anti-affinity to every other Job, and pins followers to
  the leader's domain. There is no pod webhook yet, so the controller writes the same two terms
  into the Job's pod template, for every pod: the first pod scheduled picks the domain, the
  affinity keeps the rest of the Job in it, the anti-affinity keeps other Jobs out. Upstream's
  anti-affinity also requires an equal ``jobset.sigs.k8s.io/priority`` label, so exclusivity holds
  only among pods of one priority; that label is set on Pods by the pod webhook from the resolved
  ``spec.priority``, which is unknown when the Job is built, so the term is left out here and
  exclusivity holds across priorities. Revisit both terms once the pod webhook exists.

Functions return new pod spec dicts; their input is never modified.
"""

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from jobset_controller.api import (
    EXCLUSIVE_KEY,
    JOB_KEY,
    NAMESPACED_JOB_KEY,
    NO_SCHEDULE_TAINT_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
)

NO_SCHEDULE_TOLERATION: Final[Mapping[str, str]] = MappingProxyType(
    {
        "key": NO_SCHEDULE_TAINT_KEY,
        "operator": "Exists",
        "effect": "NoSchedule",
    }
)
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def uses_node_selector_strategy(annotations: Mapping[str, str]) -> bool:
    """Both the exclusive and the node-selector annotations are present."""
    return EXCLUSIVE_KEY in annotations and NODE_SELECTOR_STRATEGY_KEY in annotations


def uses_affinity_strategy(annotations: Mapping[str, str]) -> bool:
    """Exclusive without the node-selector flag (what the pod webhook checks on the pod)."""
    return EXCLUSIVE_KEY in annotations and NODE_SELECTOR_STRATEGY_KEY not in annotations


def namespaced_job_value(namespace: str, job_name: str) -> str:
    """The node label value that selects the nodes reserved for one Job: ``<ns>_<jobName>``."""
    return f"{namespace}_{job_name}"


def with_node_selector_strategy(
    pod_spec: Mapping[str, Any], namespace: str, job_name: str
) -> dict[str, Any]:
    """``pod_spec`` with the namespaced-job nodeSelector and the no-schedule toleration added."""
    out = copy.deepcopy(dict(pod_spec))
    node_selector = dict(out.get("nodeSelector") or {})
    node_selector[NAMESPACED_JOB_KEY] = namespaced_job_value(namespace, job_name)
    out["nodeSelector"] = node_selector
    out["tolerations"] = [*(out.get("tolerations") or []), dict(NO_SCHEDULE_TOLERATION)]
    return out


def exclusive_affinity_terms(
    own_job_key: str, topology_key: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The required (podAffinity term, podAntiAffinity term) for one Job's pods."""
    affinity = {
        "labelSelector": {
            "matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": [own_job_key]}]
        },
        "topologyKey": topology_key,
        "namespaceSelector": {},
    }
    anti_affinity = {
        "labelSelector": {
            "matchExpressions": [
                {"key": JOB_KEY, "operator": "Exists"},
                {"key": JOB_KEY, "operator": "NotIn", "values": [own_job_key]},
            ]
        },
        "topologyKey": topology_key,
        "namespaceSelector": {},
    }
    return affinity, anti_affinity


def with_exclusive_affinity(
    pod_spec: Mapping[str, Any], own_job_key: str, topology_key: str
) -> dict[str, Any]:
    """``pod_spec`` with the two exclusive terms appended to its required (anti-)affinity."""
    out = copy.deepcopy(dict(pod_spec))
    affinity_term, anti_affinity_term = exclusive_affinity_terms(own_job_key, topology_key)
    affinity = dict(out.get("affinity") or {})
    for kind, term in (("podAffinity", affinity_term), ("podAntiAffinity", anti_affinity_term)):
        section = dict(affinity.get(kind) or {})
        section[_REQUIRED] = [*(section.get(_REQUIRED) or []), term]
        affinity[kind] = section
    out["affinity"] = affinity
    return out
