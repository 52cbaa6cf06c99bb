"""A ``Simulation`` for people (text) and for tools (the manifests as YAML or JSON).

Why the text shows only some labels: every child Job carries a dozen JobSet keys as labels and
annotations, and most of them repeat the JobSet's name. The ones that differ from Job to Job or
that users select on (indices, replicas, group, restart attempt, job-key) are shown; ``-o yaml``
prints everything. Pure: strings in, strings out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

from jobset_controller.api import (
    COORDINATOR_KEY,
    EXCLUSIVE_KEY,
    GLOBAL_REPLICAS_KEY,
    GROUP_NAME_KEY,
    GROUP_REPLICAS_KEY,
    JOB_GLOBAL_INDEX_KEY,
    JOB_GROUP_INDEX_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    REPLICATED_JOB_NAME_KEY,
    REPLICATED_JOB_REPLICAS_KEY,
    RESTARTS_KEY,
)
from jobset_controller.tools.plan import PLACEHOLDER_UID, Simulation

# Pod DNS names listed one by one up to this many per Job; beyond, the first and last ones.
MAX_LISTED_PODS: Final = 8
_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def manifests(simulation: Simulation) -> list[Mapping[str, Any]]:
    """What the controller would create, in the order it writes them: Service, claims, the
    Workload and its PodGroups (gang scheduling), Jobs."""
    out: list[Mapping[str, Any]] = []
    if simulation.service is not None:
        out.append(simulation.service)
    out.extend(simulation.pvcs)
    if simulation.workload is not None:
        out.append(simulation.workload)
    out.extend(simulation.pod_groups)
    out.extend(simulation.jobs)
    return out


def render_yaml(simulations: Iterable[Simulation]) -> str:
    """Every manifest as one YAML stream (``---`` between documents)."""
    documents = [dict(m) for simulation in simulations for m in manifests(simulation)]
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False)


def render_json(simulations: Iterable[Simulation]) -> str:
    """Every manifest in a ``v1`` ``List``, as ``kubectl get -o json`` prints several objects."""
    items = [m for simulation in simulations for m in manifests(simulation)]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2) + "\n"


def render_text(simulation: Simulation) -> str:
    """The simulation as an indented report (see the module docstring for what is shown)."""
    js = simulation.jobset
    namespace, name = js.metadata.namespace or "", js.metadata.name or ""
    lines = [f"JobSet {namespace}/{name}"]
    lines.append(f"  uid: assigned on create (shown as {PLACEHOLDER_UID})")
    lines.append(f"  suspend: {'true' if js.spec.suspend else 'false'}")
    coordinator = _first_label(simulation, COORDINATOR_KEY)
    if coordinator:
        lines.append(f"  coordinator: {coordinator}")
    lines.extend(_service_lines(simulation))
    lines.extend(_pvc_lines(simulation))
    lines.extend(_scheduling_lines(simulation))
    lines.extend(_job_lines(simulation))
    if simulation.waits:
        lines.append("Creation waits on:")
        for rjob, reasons in simulation.waits.items():
            lines.append(f"  {rjob}: {'; '.join(reasons)}")
    if simulation.not_created:
        lines.append(f"Not created ({len(simulation.not_created)}):")
        lines.extend(f"  {job}" for job in simulation.not_created)
    for event in (e for e in simulation.events if e.type == "Warning"):
        lines.append(f"Event {event.type} {event.reason}: {event.note}")
    if simulation.outcome:
        lines.append(f"Outcome: {simulation.outcome}")
    return "\n".join(lines) + "\n"


def _first_label(simulation: Simulation, key: str) -> str:
    for job in simulation.jobs:
        value = (job["metadata"].get("labels") or {}).get(key)
        if value:
            return str(value)
    return ""


def _service_lines(simulation: Simulation) -> list[str]:
    service = simulation.service
    if service is None:
        return ["Service: none (DNS hostnames off)"]
    spec = service["spec"]
    selector = ",".join(f"{k}={v}" for k, v in spec["selector"].items())
    return [
        f"Service {service['metadata']['name']}: headless (clusterIP None), selector {selector}, "
        f"publishNotReadyAddresses {str(spec['publishNotReadyAddresses']).lower()}"
    ]


def _pvc_lines(simulation: Simulation) -> list[str]:
    if not simulation.pvcs:
        return []
    lines = [f"PersistentVolumeClaims ({len(simulation.pvcs)}):"]
    for pvc in simulation.pvcs:
        spec = pvc.get("spec") or {}
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "?")
        modes = ",".join(spec.get("accessModes") or []) or "-"
        owned = "deleted with the JobSet" if pvc["metadata"].get("ownerReferences") else "retained"
        lines.append(f"  {pvc['metadata']['name']}  {storage}  {modes}  {owned}")
    return lines


def _scheduling_lines(simulation: Simulation) -> list[str]:
    """Gang scheduling (KEP-969): the Workload and one line per PodGroup."""
    if simulation.workload is None:
        return []
    lines = [f"Workload {simulation.workload['metadata']['name']} (scheduling.k8s.io/v1beta1):"]
    lines.extend(f"  {line}" for line in pod_group_lines(simulation.pod_groups))
    return lines


def pod_group_lines(pod_groups: Iterable[Mapping[str, Any]]) -> list[str]:
    """``PodGroup <name>  template <t>  gang minCount N`` (or ``basic``), plus its topology,
    disruption mode and claims when set; shared by ``plan`` and ``status``."""
    lines: list[str] = []
    for group in pod_groups:
        spec = group.get("spec") or {}
        policy = spec.get("schedulingPolicy") or {}
        gang = policy.get("gang")
        kind = f"gang minCount {gang.get('minCount')}" if isinstance(gang, Mapping) else "basic"
        template = (spec.get("workloadRef") or {}).get("templateName", "-")
        line = f"PodGroup {group['metadata']['name']}  template {template}  {kind}"
        topology = (spec.get("schedulingConstraints") or {}).get("topology") or ()
        if topology:
            line += "  topology " + ",".join(str(t.get("key")) for t in topology)
        if spec.get("disruptionMode"):
            line += "  disruption " + ",".join(spec["disruptionMode"])
        if spec.get("resourceClaims"):
            line += "  claims " + ",".join(str(c.get("name")) for c in spec["resourceClaims"])
        lines.append(line)
    return lines


def _job_lines(simulation: Simulation) -> list[str]:
    jobs = simulation.jobs
    passes = simulation.passes
    plural = "es" if len(passes) != 1 else ""
    lines = [f"Jobs ({len(jobs)}, created in {len(passes)} pass{plural}):"]
    for one_pass in passes:
        header = f"  pass {one_pass.number}"
        if one_pass.assumption:
            header += f", once {one_pass.assumption}"
        lines.append(header + ":")
        for job in one_pass.jobs:
            lines.extend(_one_job(job, simulation))
    return lines


def _one_job(job: Mapping[str, Any], simulation: Simulation) -> list[str]:
    metadata = job["metadata"]
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    spec = job.get("spec") or {}
    pod_spec = ((spec.get("template") or {}).get("spec")) or {}
    name = str(metadata["name"])
    lines = [
        f"    {name}  replicatedJob {labels.get(REPLICATED_JOB_NAME_KEY)}"
        f" [{labels.get(JOB_INDEX_KEY)}/{labels.get(REPLICATED_JOB_REPLICAS_KEY)}]"
        f"  parallelism {spec.get('parallelism', 1)}"
        f"  completions {spec.get('completions', '-')}"
        f"  {spec.get('completionMode', 'NonIndexed')}"
        f"  suspend {str(spec.get('suspend')).lower()}",
        f"      global index {labels.get(JOB_GLOBAL_INDEX_KEY)}/{labels.get(GLOBAL_REPLICAS_KEY)}"
        f"  group {labels.get(GROUP_NAME_KEY)}"
        f" {labels.get(JOB_GROUP_INDEX_KEY)}/{labels.get(GROUP_REPLICAS_KEY)}"
        f"  restart-attempt {labels.get(RESTARTS_KEY)}  job-key {labels.get(JOB_KEY)}",
    ]
    if EXCLUSIVE_KEY in annotations:
        strategy = "node-selector" if NODE_SELECTOR_STRATEGY_KEY in annotations else "affinity"
        lines.append(f"      exclusive per {annotations[EXCLUSIVE_KEY]} ({strategy} strategy)")
    group = (pod_spec.get("schedulingGroup") or {}).get("podGroupName")
    if group:
        lines.append(f"      podGroup {group}")
    if pod_spec.get("nodeSelector"):
        selector = ",".join(f"{k}={v}" for k, v in pod_spec["nodeSelector"].items())
        lines.append(f"      nodeSelector {selector}")
    lines.extend(f"      {line}" for line in _affinity_lines(pod_spec.get("affinity") or {}))
    for toleration in pod_spec.get("tolerations") or ():
        lines.append(
            f"      toleration {toleration.get('key')} {toleration.get('operator', 'Equal')}"
            f" {toleration.get('effect', '')}".rstrip()
        )
    dns = _pod_dns_names(name, spec, pod_spec)
    if dns:
        lines.append(f"      pods: {dns}")
    return lines


def _affinity_lines(affinity: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        for term in (affinity.get(kind) or {}).get(_REQUIRED) or ():
            expressions = (term.get("labelSelector") or {}).get("matchExpressions") or ()
            selector = ", ".join(
                f"{e.get('key')} {e.get('operator')}"
                + (f" [{', '.join(map(str, e['values']))}]" if e.get("values") else "")
                for e in expressions
            )
            lines.append(f"{kind} (required) per {term.get('topologyKey')}: {selector}")
    return lines


def _pod_dns_names(name: str, spec: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> str:
    """The pods' stable DNS names (Indexed Jobs with a subdomain), or their count otherwise."""
    completions = spec.get("completions")
    parallelism = spec.get("parallelism", 1)
    count = int(completions if completions is not None else parallelism)
    subdomain = pod_spec.get("subdomain")
    if spec.get("completionMode") != "Indexed" or not subdomain:
        return f"{count} (no stable DNS names)" if count else ""
    names = [f"{name}-{index}.{subdomain}" for index in range(count)]
    if len(names) > MAX_LISTED_PODS:
        names = [*names[:2], f"... ({count - 3} more)", names[-1]]
    return " ".join(names)
