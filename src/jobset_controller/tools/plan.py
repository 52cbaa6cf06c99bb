"""What a JobSet will create, found by running the real ``reconcile`` on an empty cluster.

Why simulate rather than build the manifests directly: the controller creates Jobs over several
passes (dependsOn, the InOrder startup policy, the bound on creates per pass), and which Jobs
exist depends on what the earlier ones did. Building the manifests here would be a second copy
of the controller's rules; calling ``reconcile`` pass after pass gives exactly its answer.

The simulated cluster, pass by pass (each pass is one call to ``reconcile``):

1. The first pass sees the JobSet and nothing else: no Jobs, no Service, no claims.
2. What a pass plans to create is taken as created, the status it writes as written.
3. Every created Job is then assumed **running with all its pods ready** (never finished), so a
   ``dependsOn: Ready`` dependency and InOrder's "started" are reached in the next pass.
4. When a pass creates nothing while Jobs are still missing, the Jobs of the replicatedJobs that a
   waiting one names with ``dependsOn: Complete`` are assumed to have **succeeded**. The success
   policy then applies as it would in the cluster: under ``Any`` that completes the JobSet, and
   the simulation says so instead of inventing the later Jobs.
5. A suspended JobSet's Jobs are created suspended and never become ready: dependents of a
   ``dependsOn`` wait for the resume, and the simulation reports them as waiting. With
   ``deferredChildren`` on, a suspended JobSet creates none until its first resume.

The JobSet's UID is assigned by the API server; ``PLACEHOLDER_UID`` stands in for it in owner
references and the ``jobset-uid`` label. Pure: the time is an input, nothing is read or written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobset_controller.api import (
    REPLICATED_JOB_NAME_KEY,
    ConditionType,
    DependsOnStatus,
    FeatureGates,
    JobSet,
    StartupPolicyOrder,
    default_jobset,
)
from jobset_controller.api.naming import job_name, name_for_validation
from jobset_controller.reconcile import Event, Snapshot, reconcile

PLACEHOLDER_UID: Final = "00000000-0000-0000-0000-000000000000"
# A JobSet needing more passes than this is cut short (and says so): 1000 creates per pass make
# this 200000 Jobs, beyond any JobSet the API server would hold.
MAX_PASSES: Final = 200
READY_ASSUMPTION: Final = "the Jobs created so far are running with all pods ready"


@dataclass(frozen=True)
class Pass:
    """One reconcile pass that created Jobs, and what the simulation assumed before it.

    ``number`` counts only the passes that created Jobs (1, 2, ...), so the last one is how many
    there are. A pass that created nothing (waiting for a dependency to finish) is not counted:
    in a cluster the number of such passes depends on how many watch events arrive meanwhile, and
    the simulation's one stands for all of them.
    """

    number: int
    assumption: str
    jobs: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Simulation:
    """Everything the controller would create for one JobSet, and how it gets there.

    Attributes:
        jobset: The JobSet as reconcile reads it: defaulted, named, in its namespace.
        service: The headless Service manifest, or None (DNS hostnames off).
        pvcs: The claim manifests of ``volumeClaimPolicies``.
        passes: The passes that created Jobs, in order.
        waits: Per replicatedJob, what holds its creation back (dependsOn, InOrder); only those
            with something to wait for.
        not_created: Jobs of the spec the simulation did not reach (suspended, completed early).
        outcome: A sentence when the simulation ended otherwise than with every Job created and
            running (the JobSet fails, completes, stays suspended...); "" otherwise.
        events: The events reconcile emitted on the way (e.g. a rejected JobSet's warning).
        workload: Gang scheduling (KEP-969): the Workload manifest, or None.
        pod_groups: Gang scheduling: the PodGroup manifests.
    """

    jobset: JobSet
    service: Mapping[str, Any] | None
    pvcs: tuple[Mapping[str, Any], ...]
    passes: tuple[Pass, ...]
    waits: Mapping[str, tuple[str, ...]]
    not_created: tuple[str, ...]
    outcome: str
    events: tuple[Event, ...]
    workload: Mapping[str, Any] | None = None
    pod_groups: tuple[Mapping[str, Any], ...] = ()

    @property
    def jobs(self) -> tuple[Mapping[str, Any], ...]:
        """Every created Job manifest, in creation order."""
        return tuple(job for one_pass in self.passes for job in one_pass.jobs)


def simulate(
    jobset: JobSet,
    *,
    namespace: str,
    now: datetime,
    features: FeatureGates | None = None,
    defer_children: bool = False,
) -> Simulation:
    """Reconcile ``jobset`` on an empty cluster until nothing more is created (see the module).

    ``defer_children`` is the Configuration's ``deferredChildren.enable``: a suspended JobSet
    then creates neither Jobs nor its Service until its first resume."""
    features = features or FeatureGates()
    document = _stored(jobset, namespace)
    service: Mapping[str, Any] | None = None
    pvcs: dict[str, Mapping[str, Any]] = {}
    workload: Mapping[str, Any] | None = None
    pod_groups: dict[str, Mapping[str, Any]] = {}
    jobs: dict[str, dict[str, Any]] = {}
    passes: list[Pass] = []
    events: list[Event] = []
    outcome = ""
    assumption = ""
    defaulted = default_jobset(JobSet.model_validate(document))
    suspended = defaulted.spec.suspend is True
    for _ in range(MAX_PASSES):
        current = JobSet.model_validate(document)
        plan = reconcile(
            Snapshot(
                jobset=current,
                jobs=tuple(jobs.values()),
                service=service,
                now=now,
                features=features,
                existing_pvcs=frozenset(pvcs),
                defer_children=defer_children,
                workload=workload,
                pod_groups=tuple(pod_groups.values()),
            )
        )
        events.extend(plan.events)
        if plan.status is not None:
            document["status"] = dict(plan.status)
        if plan.service_to_create is not None:
            service = plan.service_to_create
        for pvc in plan.pvcs_to_create:
            pvcs[str(pvc["metadata"]["name"])] = pvc
        if plan.workload_to_create is not None:
            workload = plan.workload_to_create
        for group in plan.pod_groups_to_create:
            pod_groups[_name(group)] = group
        if plan.failed or plan.completed:
            outcome = _finished_outcome(plan.status or {}, plan.failed)
            break
        if plan.jobs_to_create:
            passes.append(Pass(len(passes) + 1, assumption, tuple(plan.jobs_to_create)))
            for manifest in plan.jobs_to_create:
                jobs[_name(manifest)] = _running(manifest)
            assumption = READY_ASSUMPTION
            continue
        missing = [name for name in _expected_job_names(defaulted) if name not in jobs]
        if not missing or suspended:
            break
        finished = _complete_dependencies(defaulted, missing, jobs)
        if not finished:
            break
        assumption = f"the Jobs of {', '.join(finished)} succeeded"
    else:
        outcome = f"stopped after {MAX_PASSES} passes"
    not_created = tuple(name for name in _expected_job_names(defaulted) if name not in jobs)
    if not outcome and not_created and suspended and not jobs and defer_children:
        outcome = (
            "the JobSet is suspended and deferredChildren is on: its Jobs and Service are "
            "created at its first resume"
        )
    elif not outcome and not_created and suspended:
        outcome = "the JobSet is suspended: the remaining Jobs are created after it is resumed"
    elif not outcome and not_created:
        outcome = "the remaining Jobs are never created in this simulation"
    return Simulation(
        jobset=defaulted,
        service=service,
        pvcs=tuple(pvcs.values()),
        passes=tuple(passes),
        waits=creation_gates(defaulted),
        not_created=not_created,
        outcome=outcome,
        events=tuple(events),
        workload=workload,
        pod_groups=tuple(pod_groups.values()),
    )


def creation_gates(js: JobSet) -> dict[str, tuple[str, ...]]:
    """What each replicatedJob waits for before its Jobs are created, read from the spec."""
    in_order = (
        js.spec.startup_policy is not None
        and js.spec.startup_policy.startup_policy_order == StartupPolicyOrder.IN_ORDER
        and js.spec.suspend is not True
    )
    gates: dict[str, tuple[str, ...]] = {}
    previous: str | None = None
    for rjob in js.spec.replicated_jobs:
        reasons = [
            f"dependsOn {dependency.name} {dependency.status.value}"
            for dependency in rjob.depends_on or ()
        ]
        if in_order and previous is not None:
            reasons.append(f"InOrder: {previous} started")
        if reasons:
            gates[rjob.name] = tuple(reasons)
        previous = rjob.name
    return gates


def _stored(jobset: JobSet, namespace: str) -> dict[str, Any]:
    """The JobSet as the API server would hand it to the controller: named, namespaced, a UID."""
    document = jobset.to_dict()
    metadata = dict(document.get("metadata") or {})
    metadata["name"] = name_for_validation(jobset.metadata)
    metadata["namespace"] = metadata.get("namespace") or namespace
    metadata["uid"] = PLACEHOLDER_UID
    metadata.pop("generateName", None)
    document["metadata"] = metadata
    document.pop("status", None)
    return document


def _name(manifest: Mapping[str, Any]) -> str:
    return str(manifest["metadata"]["name"])


def _running(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The created Job as the simulation pretends it is: ready, or suspended when created so."""
    job = dict(manifest)
    metadata = dict(job["metadata"])
    metadata["uid"] = f"simulated-{metadata['name']}"
    metadata["resourceVersion"] = "1"
    job["metadata"] = metadata
    spec = job.get("spec") or {}
    if spec.get("suspend") is True:
        job["status"] = {}
        return job
    parallelism = spec.get("parallelism")
    pods = 1 if parallelism is None else int(parallelism)
    job["status"] = {"active": pods, "ready": pods}
    return job


def _succeeded(job: Mapping[str, Any]) -> dict[str, Any]:
    spec = job.get("spec") or {}
    completions = spec.get("completions")
    done = dict(job)
    done["status"] = {
        "succeeded": 1 if completions is None else int(completions),
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    return done


def _expected_job_names(js: JobSet) -> list[str]:
    name = js.metadata.name or ""
    return [
        job_name(name, rjob.name, index)
        for rjob in js.spec.replicated_jobs
        for index in range(rjob.replicas)
    ]


def _complete_dependencies(
    js: JobSet, missing: Sequence[str], jobs: dict[str, dict[str, Any]]
) -> list[str]:
    """Mark succeeded the Jobs a waiting replicatedJob needs Complete; the names marked."""
    name = js.metadata.name or ""
    waiting = {
        rjob.name
        for rjob in js.spec.replicated_jobs
        if any(job_name(name, rjob.name, index) in missing for index in range(rjob.replicas))
    }
    needed: list[str] = []
    for rjob in js.spec.replicated_jobs:
        if rjob.name not in waiting:
            continue
        for dependency in rjob.depends_on or ():
            if dependency.status == DependsOnStatus.COMPLETE and dependency.name not in needed:
                needed.append(dependency.name)
    marked: list[str] = []
    for job_key, job in list(jobs.items()):
        rjob_name = job["metadata"].get("labels", {}).get(REPLICATED_JOB_NAME_KEY)
        if rjob_name in needed and "succeeded" not in (job.get("status") or {}):
            jobs[job_key] = _succeeded(job)
            if rjob_name not in marked:
                marked.append(str(rjob_name))
    return marked


def _finished_outcome(status: Mapping[str, Any], failed: bool) -> str:
    wanted = ConditionType.FAILED if failed else ConditionType.COMPLETED
    for condition in status.get("conditions") or ():
        if condition.get("type") == wanted and condition.get("status") == "True":
            verb = "fails" if failed else "completes"
            return f"the JobSet {verb}: {condition.get('reason')}: {condition.get('message')}"
    return "the JobSet fails" if failed else "the JobSet completes"
