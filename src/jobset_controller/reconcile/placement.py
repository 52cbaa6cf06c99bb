"""Exclusive placement: one child Job per topology domain (docs/behaviour.md#exclusive-placement).

A JobSet asks for it with the ``alpha.jobset.sigs.k8s.io/exclusive-topology: <node label key>``
annotation. Two strategies put the Job's pods into a domain of their own:

* **node-selector strategy** (the ``alpha.jobset.sigs.k8s.io/node-selector`` annotation too, on
  the Job): the pods select nodes labelled ``namespaced-job=<ns>_<jobName>`` and tolerate the
  ``no-schedule`` taint. The user labels and taints the nodes beforehand.
* **affinity strategy** (the default), two ways, chosen per Job when it is created:

  - **leader/follower** (the pod webhooks are active, ``Snapshot.pod_webhooks``): the Job gets
    no affinity; its pod template is labelled ``jobset.sigs.k8s.io/exclusive-placement:
    leader-follower`` and the pod webhooks give the leader its affinity terms (with the priority
    match) and pin followers to the leader's domain. Required affinity on every pod is what makes
    the scheduler slow at scale, so this is the way whenever it is available.
  - **affinity in the template** (the fallback when the webhooks are not known to be active:
    a JobSet must never silently lose exclusivity): the controller writes the two terms into the
    pod template, for every pod. The first pod scheduled picks the domain, the affinity keeps the
    rest of the Job in it, the anti-affinity keeps other Jobs out. The priority match is left out
    (the pod's priority is unknown when the Job is built), so here exclusivity holds across
    priorities.

Functions return new pod spec dicts; their input is never modified.
"""

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from jobset_controller.api import (
    EXCLUSIVE_KEY,
    NAMESPACED_JOB_KEY,
    NO_SCHEDULE_TAINT_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
)
from jobset_controller.api.placement import exclusive_terms, with_terms

NO_SCHEDULE_TOLERATION: Final[Mapping[str, str]] = MappingProxyType(
    {
        "key": NO_SCHEDULE_TAINT_KEY,
        "operator": "Exists",
        "effect": "NoSchedule",
    }
)


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
    """The required (podAffinity term, podAntiAffinity term) written into a fallback Job."""
    return exclusive_terms(own_job_key, topology_key, priority=None)


def with_exclusive_affinity(
    pod_spec: Mapping[str, Any], own_job_key: str, topology_key: str
) -> dict[str, Any]:
    """``pod_spec`` with the two exclusive terms appended to its required (anti-)affinity."""
    out = copy.deepcopy(dict(pod_spec))
    out["affinity"] = with_terms(
        out.get("affinity"), exclusive_affinity_terms(own_job_key, topology_key)
    )
    return out
