"""Builders for reconcile tests: JobSets, child Jobs in a given state, snapshots, and a tiny
pure "cluster" (``apply_plan``) that carries a Plan out on a snapshot.

Everything is reached through the session fixture ``kit`` (tests import nothing from here at
run time; ``Kit`` is imported for type checking only), so a table row states only what differs:
``kit.jobset().replicated_job("workers", replicas=2).suspend().build()``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobset_controller.api import (
    JOB_INDEX_KEY,
    JOB_RESTART_ATTEMPT_KEY,
    JOBSET_NAME_KEY,
    REPLICATED_JOB_NAME_KEY,
    RESTARTS_KEY,
    FeatureGates,
    JobSet,
)
from jobset_controller.reconcile import Plan, Snapshot, reconcile

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2025-06-01T12:00:00Z"
EARLIER = NOW - timedelta(minutes=10)
EARLIER_TEXT = "2025-06-01T11:50:00Z"

NAME = "trainer"
NAMESPACE = "ml"
UID = "jobset-uid-1"


def _pod_template() -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}


class JobSetBuilder:
    """A JobSet wire dict grown by chained calls; ``build()`` validates it into a model."""

    def __init__(self, name: str = NAME, namespace: str = NAMESPACE, uid: str = UID) -> None:
        self._wire: dict[str, Any] = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"replicatedJobs": []},
        }

    # --- spec ----------------------------------------------------------------------------------

    def replicated_job(
        self,
        name: str,
        *,
        replicas: int = 1,
        parallelism: int | None = 1,
        completions: int | None = 1,
        group_name: str | None = None,
        depends_on: Sequence[tuple[str, str]] | None = None,
        job_labels: Mapping[str, str] | None = None,
        job_annotations: Mapping[str, str] | None = None,
        pod_labels: Mapping[str, str] | None = None,
        pod_annotations: Mapping[str, str] | None = None,
        pod_spec: Mapping[str, Any] | None = None,
    ) -> JobSetBuilder:
        """Append a replicatedJob; ``pod_spec`` entries are merged into a one-container spec."""
        job_spec: dict[str, Any] = {"template": _pod_template()}
        if parallelism is not None:
            job_spec["parallelism"] = parallelism
        if completions is not None:
            job_spec["completions"] = completions
        pod = job_spec["template"]
        pod["spec"].update(copy.deepcopy(dict(pod_spec or {})))
        pod_metadata: dict[str, Any] = {}
        if pod_labels:
            pod_metadata["labels"] = dict(pod_labels)
        if pod_annotations:
            pod_metadata["annotations"] = dict(pod_annotations)
        if pod_metadata:
            pod["metadata"] = pod_metadata
        template: dict[str, Any] = {"spec": job_spec}
        job_metadata: dict[str, Any] = {}
        if job_labels:
            job_metadata["labels"] = dict(job_labels)
        if job_annotations:
            job_metadata["annotations"] = dict(job_annotations)
        if job_metadata:
            template["metadata"] = job_metadata
        rjob: dict[str, Any] = {"name": name, "replicas": replicas, "template": template}
        if group_name is not None:
            rjob["groupName"] = group_name
        if depends_on is not None:
            rjob["dependsOn"] = [{"name": dep, "status": status} for dep, status in depends_on]
        self._wire["spec"]["replicatedJobs"].append(rjob)
        return self

    def scheduling(self, **fields: Any) -> JobSetBuilder:
        """``spec.scheduling`` (KEP-969), e.g. ``scheduling(schedulingPolicy={"gang": {}})``."""
        self._wire["spec"]["scheduling"] = copy.deepcopy(fields)
        return self

    def suspend(self, value: bool = True) -> JobSetBuilder:
        self._wire["spec"]["suspend"] = value
        return self

    def failure_policy(
        self,
        *rules: Mapping[str, Any],
        max_restarts: int = 0,
        restart_strategy: str | None = None,
    ) -> JobSetBuilder:
        policy: dict[str, Any] = {"maxRestarts": max_restarts, "rules": [dict(r) for r in rules]}
        if restart_strategy is not None:
            policy["restartStrategy"] = restart_strategy
        self._wire["spec"]["failurePolicy"] = policy
        return self

    def success_policy(self, operator: str, *targets: str) -> JobSetBuilder:
        policy: dict[str, Any] = {"operator": operator}
        if targets:
            policy["targetReplicatedJobs"] = list(targets)
        self._wire["spec"]["successPolicy"] = policy
        return self

    def in_order(self) -> JobSetBuilder:
        self._wire["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
        return self

    def ttl(self, seconds: int) -> JobSetBuilder:
        self._wire["spec"]["ttlSecondsAfterFinished"] = seconds
        return self

    def active_deadline(self, seconds: int | None) -> JobSetBuilder:
        """``spec.activeDeadlineSeconds`` (None removes it)."""
        if seconds is None:
            self._wire["spec"].pop("activeDeadlineSeconds", None)
        else:
            self._wire["spec"]["activeDeadlineSeconds"] = seconds
        return self

    def network(self, **fields: Any) -> JobSetBuilder:
        self._wire["spec"]["network"] = dict(fields)
        return self

    def coordinator(self, rjob: str, job_index: int = 0, pod_index: int = 0) -> JobSetBuilder:
        self._wire["spec"]["coordinator"] = {
            "replicatedJob": rjob,
            "jobIndex": job_index,
            "podIndex": pod_index,
        }
        return self

    def managed_by(self, manager: str) -> JobSetBuilder:
        self._wire["spec"]["managedBy"] = manager
        return self

    def volume_claim(
        self,
        name: str,
        *,
        when_deleted: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> JobSetBuilder:
        """A volumeClaimPolicy with one template named ``name``."""
        template: dict[str, Any] = {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        if labels:
            template["metadata"]["labels"] = dict(labels)
        policy: dict[str, Any] = {"templates": [template]}
        if when_deleted is not None:
            policy["retentionPolicy"] = {"whenDeleted": when_deleted}
        self._wire["spec"].setdefault("volumeClaimPolicies", []).append(policy)
        return self

    # --- metadata ------------------------------------------------------------------------------

    def annotations(self, **annotations: str) -> JobSetBuilder:
        self._wire["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def annotate(self, key: str, value: str) -> JobSetBuilder:
        self._wire["metadata"].setdefault("annotations", {})[key] = value
        return self

    def deleting(self) -> JobSetBuilder:
        self._wire["metadata"]["deletionTimestamp"] = NOW_TEXT
        return self

    # --- status --------------------------------------------------------------------------------

    def status(self, **fields: Any) -> JobSetBuilder:
        """Set top-level status fields by wire name (``restarts=1, terminalState=...``)."""
        self._wire.setdefault("status", {}).update(copy.deepcopy(fields))
        return self

    def condition(
        self,
        type_: str,
        status: str = "True",
        reason: str = "Reason",
        message: str = "message",
        at: str = EARLIER_TEXT,
    ) -> JobSetBuilder:
        conditions = self._wire.setdefault("status", {}).setdefault("conditions", [])
        conditions.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": at,
            }
        )
        return self

    def wire(self) -> dict[str, Any]:
        return copy.deepcopy(self._wire)

    def copy(self) -> JobSetBuilder:
        """An independent builder with the same content."""
        out = JobSetBuilder()
        out._wire = self.wire()
        return out

    def build(self) -> JobSet:
        return JobSet.model_validate(self.wire())


def make_job(
    rjob: str,
    index: int,
    *,
    state: str = "active",
    jobset: str = NAME,
    namespace: str = NAMESPACE,
    restart_attempt: int = 0,
    job_restart_attempt: int | None = None,
    parallelism: int = 1,
    completions: int | None = 1,
    suspended: bool = False,
    reason: str = "BackoffLimitExceeded",
    message: str = "Job has reached the specified backoff limit",
    finished_at: str = EARLIER_TEXT,
    start_time: str | None = None,
    deleting: bool = False,
    labels: Mapping[str, str | None] | None = None,
    pod_template: Mapping[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A child Job wire dict as the API server would show it, in one of these states.

    ``pending`` (created, no pod running), ``active`` (pods running, not ready), ``ready``,
    ``succeeded`` (Complete=True), ``failed`` (Failed=True with reason/message/finished_at);
    the interim states of the Job controller, pods still terminating: ``failure-target``
    (FailureTarget=True, with reason/message/finished_at as ``failed``) and
    ``success-criteria-met`` (SuccessCriteriaMet=True).
    ``labels`` overrides labels; a None value removes the label.
    """
    name = f"{jobset}-{rjob}-{index}"
    job_labels: dict[str, str] = {
        JOBSET_NAME_KEY: jobset,
        REPLICATED_JOB_NAME_KEY: rjob,
        RESTARTS_KEY: str(restart_attempt),
        JOB_INDEX_KEY: str(index),
    }
    if job_restart_attempt is not None:
        job_labels[JOB_RESTART_ATTEMPT_KEY] = str(job_restart_attempt)
    for key, value in (labels or {}).items():
        if value is None:
            job_labels.pop(key, None)
        else:
            job_labels[key] = value
    spec: dict[str, Any] = {"parallelism": parallelism, "suspend": suspended}
    if completions is not None:
        spec["completions"] = completions
    spec["template"] = copy.deepcopy(dict(pod_template or {"metadata": {"labels": job_labels}}))
    status: dict[str, Any] = {}
    if state == "active":
        status["active"] = parallelism
    elif state == "ready":
        status.update(active=parallelism, ready=parallelism)
    elif state == "succeeded":
        status["succeeded"] = completions or 1
        status["conditions"] = [_job_condition("Complete", "", "", finished_at)]
    elif state == "failed":
        status["failed"] = 1
        status["conditions"] = [_job_condition("Failed", reason, message, finished_at)]
    elif state == "failure-target":
        status.update(failed=1, terminating=parallelism)
        status["conditions"] = [_job_condition("FailureTarget", reason, message, finished_at)]
    elif state == "success-criteria-met":
        status.update(succeeded=completions or 1, terminating=parallelism)
        status["conditions"] = [
            _job_condition("SuccessCriteriaMet", "CompletionsReached", "", finished_at)
        ]
    elif state != "pending":
        raise ValueError(f"unknown job state {state!r}")
    if start_time is not None:
        status["startTime"] = start_time
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}-{restart_attempt}",
        "resourceVersion": "100",
        "labels": job_labels,
    }
    if deleting:
        metadata["deletionTimestamp"] = NOW_TEXT
    return {"metadata": metadata, "spec": spec, "status": status}


def _job_condition(type_: str, reason: str, message: str, at: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def make_snapshot(
    jobset: JobSet | JobSetBuilder,
    *jobs: Mapping[str, Any],
    service: Mapping[str, Any] | None = None,
    features: FeatureGates | None = None,
    now: datetime = NOW,
    scheduling_api: bool = True,
    early_job_conditions: bool = False,
    failed_pods: Sequence[Mapping[str, Any]] = (),
) -> Snapshot:
    js = jobset.build() if isinstance(jobset, JobSetBuilder) else jobset
    return Snapshot(
        jobset=js,
        jobs=tuple(jobs),
        service=service,
        now=now,
        features=features or FeatureGates(),
        scheduling_api=scheduling_api,
        early_job_conditions=early_job_conditions,
        failed_pods=tuple(failed_pods),
    )


def make_failed_pod(
    job: Mapping[str, Any],
    suffix: str = "abcde",
    *,
    node: str = "node-1",
    exit_code: int | None = 3,
    container: str = "main",
    reason: str = "Error",
    finished_at: str = EARLIER_TEXT,
    deleting: bool = False,
    pod_reason: str = "",
    pod_message: str = "",
) -> dict[str, Any]:
    """A failed pod of ``job`` (a ``make_job`` dict) as the pod cache keeps it: a container that
    exited with ``exit_code`` (None: no container status, e.g. an evicted pod)."""
    meta = job["metadata"]
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"{meta['name']}-0-{suffix}",
            "namespace": meta["namespace"],
            "uid": f"uid-pod-{meta['name']}-{suffix}",
            "labels": {JOBSET_NAME_KEY: meta["labels"][JOBSET_NAME_KEY]},
            "ownerReferences": [{"uid": meta["uid"], "controller": True}],
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Failed"},
    }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = NOW_TEXT
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": reason, "finishedAt": finished_at}
        pod["status"]["containerStatuses"] = [
            {"name": container, "state": {"terminated": terminated}}
        ]
    if pod_reason:
        pod["status"]["reason"] = pod_reason
    if pod_message:
        pod["status"]["message"] = pod_message
    return pod


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of ``target`` (not modified) with ``patch``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def apply_plan(snapshot: Snapshot, plan: Plan) -> Snapshot | None:
    """The snapshot after the executor carried ``plan`` out and nothing else happened.

    Deleted Jobs disappear, patches are merged in (clearing startTime first when asked),
    created Jobs appear with running pods (none when created suspended), the Service appears,
    the status is replaced. Returns None when the Plan deletes the JobSet.
    """
    if plan.delete_jobset:
        return None
    deleted = {(delete.name, delete.uid) for delete in plan.jobs_to_delete}
    patches = {patch.name: patch for patch in plan.jobs_to_patch}
    jobs: list[Mapping[str, Any]] = []
    for job in snapshot.jobs:
        metadata = job["metadata"]
        if (metadata["name"], metadata["uid"]) in deleted:
            continue
        patch = patches.get(metadata["name"])
        if patch is not None:
            patched: dict[str, Any] = copy.deepcopy(dict(job))
            if patch.clear_start_time:
                patched.get("status", {}).pop("startTime", None)
            job = merge_patch(patched, patch.patch)
        jobs.append(job)
    for manifest in plan.jobs_to_create:
        new: dict[str, Any] = copy.deepcopy(dict(manifest))
        new["metadata"]["uid"] = f"created-{new['metadata']['name']}-{len(jobs)}"
        new["metadata"]["resourceVersion"] = "1"
        suspended = new["spec"].get("suspend") is True
        new["status"] = {} if suspended else {"active": new["spec"].get("parallelism", 1)}
        jobs.append(new)
    js = snapshot.jobset
    if plan.status is not None:
        wire = js.to_dict()
        wire["status"] = copy.deepcopy(dict(plan.status))
        js = JobSet.model_validate(wire)
    service = snapshot.service
    if plan.service_to_create is not None:
        service = plan.service_to_create
    workload, pod_groups = _apply_scheduling(snapshot, plan)
    return dataclasses.replace(
        snapshot,
        jobset=js,
        jobs=tuple(jobs),
        service=service,
        workload=workload,
        pod_groups=pod_groups,
    )


def _apply_scheduling(
    snapshot: Snapshot, plan: Plan
) -> tuple[Mapping[str, Any] | None, tuple[Mapping[str, Any], ...]]:
    """The Workload and PodGroups after the Plan's deletes, creates and minCount patches."""
    deleted = {(write.kind, write.name) for write in plan.scheduling_to_delete}
    patches = {(write.kind, write.name): write.patch for write in plan.scheduling_to_patch}

    def kept(kind: str, obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if obj is None or (kind, obj["metadata"]["name"]) in deleted:
            return None
        patch = patches.get((kind, obj["metadata"]["name"]))
        return obj if patch is None else merge_patch(obj, patch)

    workload = kept("Workload", snapshot.workload)
    if plan.workload_to_create is not None:
        workload = _with_uid(plan.workload_to_create)
    groups = [kept("PodGroup", group) for group in snapshot.pod_groups]
    groups += [_with_uid(group) for group in plan.pod_groups_to_create]
    return workload, tuple(group for group in groups if group is not None)


def _with_uid(manifest: Mapping[str, Any]) -> dict[str, Any]:
    new: dict[str, Any] = copy.deepcopy(dict(manifest))
    new["metadata"]["uid"] = f"uid-{new['kind']}-{new['metadata']['name']}"
    return new


def settle(snapshot: Snapshot, *, passes: int = 10) -> tuple[Snapshot, Plan]:
    """Reconcile and apply until a pass writes nothing; the final snapshot and its Plan."""
    for _ in range(passes):
        plan = reconcile(snapshot)
        if has_no_writes(plan):
            return snapshot, plan
        applied = apply_plan(snapshot, plan)
        assert applied is not None, "the JobSet was deleted while settling"
        snapshot = applied
    raise AssertionError(f"no steady state after {passes} passes")


def has_no_writes(plan: Plan) -> bool:
    """The Plan writes nothing and emits nothing (PVC ensures and requeues aside)."""
    return dataclasses.replace(plan, pvcs_to_create=(), requeue_after=None).is_empty()


class Kit:
    """The builders, reachable from tests through the ``kit`` fixture."""

    now = NOW
    now_text = NOW_TEXT
    earlier = EARLIER
    earlier_text = EARLIER_TEXT
    name = NAME
    namespace = NAMESPACE
    uid = UID

    @staticmethod
    def jobset(name: str = NAME, namespace: str = NAMESPACE, uid: str = UID) -> JobSetBuilder:
        return JobSetBuilder(name, namespace, uid)

    job = staticmethod(make_job)
    failed_pod = staticmethod(make_failed_pod)
    snapshot = staticmethod(make_snapshot)
    apply_plan = staticmethod(apply_plan)
    merge_patch = staticmethod(merge_patch)
    has_no_writes = staticmethod(has_no_writes)
    settle = staticmethod(settle)

    @staticmethod
    def reconcile(
        jobset: JobSet | JobSetBuilder,
        *jobs: Mapping[str, Any],
        service: Mapping[str, Any] | None = None,
        features: FeatureGates | None = None,
        now: datetime = NOW,
        early_job_conditions: bool = False,
        failed_pods: Sequence[Mapping[str, Any]] = (),
    ) -> Plan:
        """``reconcile`` of a snapshot built from the arguments."""
        return reconcile(
            make_snapshot(
                jobset,
                *jobs,
                service=service,
                features=features,
                now=now,
                early_job_conditions=early_job_conditions,
                failed_pods=failed_pods,
            )
        )

    @staticmethod
    def service(name: str = NAME) -> dict[str, Any]:
        """An existing headless Service."""
        return {"metadata": {"name": name, "namespace": NAMESPACE}}

    @staticmethod
    def running(
        jobset: JobSetBuilder, *, state: str = "active", **job_fields: Any
    ) -> tuple[Mapping[str, Any], ...]:
        """Every Job of ``jobset`` (current attempt) in ``state``."""
        js = jobset.build()
        return tuple(
            make_job(rjob.name, index, state=state, jobset=js.metadata.name or "", **job_fields)
            for rjob in js.spec.replicated_jobs
            for index in range(rjob.replicas)
        )


@pytest.fixture(scope="session")
def kit() -> Kit:
    """The reconcile test kit (builders, snapshot, apply_plan)."""
    return Kit()
