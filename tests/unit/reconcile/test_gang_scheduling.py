"""Gang scheduling, KEP-969 (docs/behaviour.md#gang-scheduling): the pure decisions.

One test per guarantee: which Workload and PodGroups a pass wants, their names and minCounts, the
pods' links, suspend/resume, sequenced startup, elastic minCount patches, the missing API, and
nothing at all with the gate off; a resume held while an old PodGroup is Terminating, and Jobs
recreated on resume when a regrouping while suspended changed their PodGroup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobset_controller.api import FeatureGates, JobSet
from jobset_controller.api.gang import (
    GROUP_TEMPLATE_ANNOTATION,
    name_hash,
    workload_name,
)
from jobset_controller.reconcile import Plan, reconcile
from jobset_controller.reconcile.snapshot import Snapshot
from jobset_controller.reconcile.timestamps import format_time

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

GATE = FeatureGates(workload_aware_scheduling=True)
GATE_AND_ELASTIC = FeatureGates(workload_aware_scheduling=True, elastic_job_set=True)
GANG: dict[str, Any] = {"schedulingPolicy": {"gang": {}}}


def training(kit: Kit) -> JobSetBuilder:
    """A leader (1 Job x 1 pod) and workers (2 Jobs x 4 pods): 9 pods."""
    return (
        kit.jobset()
        .replicated_job("leader")
        .replicated_job("workers", replicas=2, parallelism=4, completions=4)
    )


def first_pass(kit: Kit, builder: JobSetBuilder, **kwargs: Any) -> Plan:
    return reconcile(kit.snapshot(builder, features=kwargs.pop("features", GATE), **kwargs))


def present(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    assert obj is not None
    return obj


def pod_groups(plan: Plan) -> dict[str, dict[str, Any]]:
    return {group["metadata"]["name"]: dict(group) for group in plan.pod_groups_to_create}


def links(plan: Plan) -> dict[str, tuple[str, str]]:
    """Job name -> (template annotation, the pods' PodGroup)."""
    return {
        job["metadata"]["name"]: (
            job["metadata"]["annotations"][GROUP_TEMPLATE_ANNOTATION],
            job["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"],
        )
        for job in plan.jobs_to_create
    }


def test_gate_off_creates_no_workload_no_pod_group_and_leaves_jobs_unlinked(kit: Kit) -> None:
    builder = training(kit).scheduling(**GANG)
    plan = first_pass(kit, builder, features=FeatureGates())
    unscheduled = first_pass(kit, training(kit), features=FeatureGates())
    assert plan.workload_to_create is None
    assert plan.pod_groups_to_create == ()
    assert plan.jobs_to_create == unscheduled.jobs_to_create
    assert plan.status == unscheduled.status  # not failed as invalid either


def test_no_scheduling_field_creates_nothing_with_the_gate_on(kit: Kit) -> None:
    plan = first_pass(kit, training(kit))
    assert plan.workload_to_create is None
    assert plan.pod_groups_to_create == ()
    assert all(
        "schedulingGroup" not in job["spec"]["template"]["spec"] for job in plan.jobs_to_create
    )


def test_one_workload_owned_by_the_jobset(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG))
    workload = plan.workload_to_create
    assert workload is not None
    assert workload["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert workload["kind"] == "Workload"
    (owner,) = workload["metadata"]["ownerReferences"]
    assert owner["kind"] == "JobSet"
    assert owner["uid"] == kit.uid
    assert owner["controller"] is True
    assert workload["spec"]["controllerRef"] == {
        "apiGroup": "jobset.x-k8s.io",
        "kind": "JobSet",
        "name": kit.name,
    }


def test_jobset_wide_gang_is_one_pod_group_with_min_count_all_pods(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG))
    (group,) = plan.pod_groups_to_create
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 9}}
    assert group["spec"]["workloadRef"] == {
        "workloadName": workload_name(training(kit).build()),
        "templateName": kit.name,
    }
    assert [t["name"] for t in present(plan.workload_to_create)["spec"]["podGroupTemplates"]] == [
        kit.name
    ]


def test_empty_scheduling_defaults_to_a_jobset_wide_gang(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling())
    (group,) = plan.pod_groups_to_create
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 9}}


def test_explicit_min_count_is_kept(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(schedulingPolicy={"gang": {"minCount": 5}}))
    (group,) = plan.pod_groups_to_create
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}


def test_top_level_pod_group_and_workload_are_named_jobset_dash_hash(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG))
    expected = f"{kit.name}-{name_hash('JobSet', kit.namespace, kit.name)}"
    assert present(plan.workload_to_create)["metadata"]["name"] == expected
    assert list(pod_groups(plan)) == [expected]


def test_every_pod_links_to_its_pod_group_and_every_job_names_its_template(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG))
    (group,) = pod_groups(plan)
    assert set(links(plan).values()) == {(kit.name, group)}
    assert len(plan.jobs_to_create) == 3


def test_per_replicated_job_groups_basic_or_gang(kit: Kit) -> None:
    builder = training(kit).scheduling(
        replicatedJobs=[
            {"targetReplicatedJobs": ["leader"], "schedulingPolicy": {"basic": {}}},
            {"targetReplicatedJobs": ["workers"]},
        ]
    )
    plan = first_pass(kit, builder)
    by_template = {g["spec"]["workloadRef"]["templateName"]: g for g in plan.pod_groups_to_create}
    assert by_template["leader"]["spec"]["schedulingPolicy"] == {"basic": {}}
    assert by_template["workers"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 8}}
    leader_group = by_template["leader"]["metadata"]["name"]
    hashed = name_hash("ReplicatedJob", kit.namespace, f"{kit.name}/leader")
    assert leader_group == f"{kit.name}-leader-{hashed}"
    assert links(plan)[f"{kit.name}-leader-0"] == ("leader", leader_group)
    worker_group = by_template["workers"]["metadata"]["name"]
    assert links(plan)[f"{kit.name}-workers-1"] == ("workers", worker_group)


def test_targets_listed_together_share_one_group_named_after_them_joined(kit: Kit) -> None:
    builder = training(kit).scheduling(
        replicatedJobs=[{"targetReplicatedJobs": ["leader", "workers"]}]
    )
    plan = first_pass(kit, builder)
    (group,) = plan.pod_groups_to_create
    assert group["spec"]["workloadRef"]["templateName"] == "leader-workers"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 9}}


def test_job_level_gangs_are_one_pod_group_per_job(kit: Kit) -> None:
    builder = training(kit).scheduling(
        replicatedJobs=[
            {"targetReplicatedJobs": ["leader"]},
            {"targetReplicatedJobs": ["workers"], "job": {"schedulingPolicy": {"gang": {}}}},
        ]
    )
    plan = first_pass(kit, builder)
    templates = [t["name"] for t in present(plan.workload_to_create)["spec"]["podGroupTemplates"]]
    assert templates == ["leader", "workers-0", "workers-1"]
    by_template = {g["spec"]["workloadRef"]["templateName"]: g for g in plan.pod_groups_to_create}
    assert by_template["workers-1"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert links(plan)[f"{kit.name}-workers-1"] == (
        "workers-1",
        by_template["workers-1"]["metadata"]["name"],
    )


def test_topology_disruption_and_claims_are_copied_to_the_template_and_pod_group(
    kit: Kit,
) -> None:
    claim = {"name": "imex", "resourceClaimTemplateName": "imex-template"}
    builder = training(kit).scheduling(
        replicatedJobs=[
            {"targetReplicatedJobs": ["leader"]},
            {
                "targetReplicatedJobs": ["workers"],
                "schedulingConstraints": {"topology": [{"key": "cloud/rack"}]},
                "disruptionMode": {"all": {}},
                "resourceClaims": [claim],
            },
        ]
    )
    plan = first_pass(kit, builder)
    template = present(plan.workload_to_create)["spec"]["podGroupTemplates"][1]
    group = plan.pod_groups_to_create[1]
    for spec in (template, group["spec"]):
        assert spec["schedulingConstraints"] == {"topology": [{"key": "cloud/rack"}]}
        assert spec["disruptionMode"] == {"all": {}}
        assert spec["resourceClaims"] == [claim]


def test_long_names_are_cut_to_a_dns_label_and_stay_distinct(kit: Kit) -> None:
    names = [f"{letter * 18}" for letter in "abcd"]
    builder = kit.jobset(name="j" * 15)
    for name in names:
        builder.replicated_job(name)
    builder.scheduling(
        replicatedJobs=[
            {"targetReplicatedJobs": names[:2]},
            {"targetReplicatedJobs": names[2:]},
        ]
    )
    groups = list(pod_groups(first_pass(kit, builder)))
    assert len(set(groups)) == 2
    assert all(len(group) == 63 for group in groups)  # 15 + 1 + 37 + 11 would be 64
    assert groups == list(pod_groups(first_pass(kit, builder)))  # deterministic


def test_in_order_startup_uses_one_gang_per_replicated_job(kit: Kit) -> None:
    builder = training(kit).in_order().scheduling(**GANG)
    plan = first_pass(kit, builder)
    by_template = {g["spec"]["workloadRef"]["templateName"]: g for g in plan.pod_groups_to_create}
    assert set(by_template) == {"leader", "workers"}
    assert by_template["leader"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    assert by_template["workers"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 8}}


def test_depends_on_uses_one_gang_per_replicated_job_and_never_deadlocks(kit: Kit) -> None:
    builder = (
        kit.jobset()
        .replicated_job("leader")
        .replicated_job("workers", replicas=2, depends_on=[("leader", "Ready")])
        .scheduling(**GANG)
    )
    snapshot = kit.snapshot(builder, features=GATE)
    plan = reconcile(snapshot)
    # Only the leader's Job is created now, and its own gang (minCount 1) can be satisfied.
    assert [job["metadata"]["name"] for job in plan.jobs_to_create] == [f"{kit.name}-leader-0"]
    groups = {g["spec"]["workloadRef"]["templateName"]: g for g in plan.pod_groups_to_create}
    assert groups["leader"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    assert links(plan)[f"{kit.name}-leader-0"][0] == "leader"


def test_steady_state_writes_nothing(kit: Kit) -> None:
    snapshot, plan = kit.settle(kit.snapshot(training(kit).scheduling(**GANG), features=GATE))
    assert snapshot.workload is not None
    assert len(snapshot.pod_groups) == 1
    assert kit.has_no_writes(plan)


def test_suspend_deletes_the_workload_and_pod_groups(kit: Kit) -> None:
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    suspended = dataclasses.replace(running, jobset=builder.copy().suspend().build())
    plan = reconcile(suspended)
    deleted = {(write.kind, write.name, write.uid) for write in plan.scheduling_to_delete}
    group = running.pod_groups[0]["metadata"]
    workload = present(running.workload)["metadata"]
    assert deleted == {
        ("PodGroup", group["name"], group["uid"]),
        ("Workload", workload["name"], workload["uid"]),
    }
    assert plan.workload_to_create is None
    assert plan.pod_groups_to_create == ()


def test_a_pod_group_already_terminating_is_not_deleted_again(kit: Kit) -> None:
    """1.37's podgroup-protection finalizer keeps a PodGroup Terminating while pods name it."""
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    (group,) = running.pod_groups
    terminating = {
        **group,
        "metadata": {**group["metadata"], "deletionTimestamp": "2026-11-26T06:00:00Z"},
    }
    suspended = dataclasses.replace(
        running, jobset=builder.copy().suspend().build(), pod_groups=(terminating,)
    )
    deleted = {write.kind for write in reconcile(suspended).scheduling_to_delete}
    assert deleted == {"Workload"}


def test_created_suspended_makes_no_workload(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG).suspend())
    assert plan.workload_to_create is None
    assert plan.pod_groups_to_create == ()


def test_jobs_created_suspended_are_linked_to_the_groups_the_resume_creates(kit: Kit) -> None:
    """Kueue's case: the JobSet is created suspended and its Jobs exist before admission. A
    suspended Job's pod template cannot gain schedulingGroup on resume, so the Jobs must carry
    it from their creation (found by the Kueue e2e on 1.37.2: unlinked pods ran unganged)."""
    builder = training(kit).scheduling(**GANG)
    plan = first_pass(kit, builder.copy().suspend())
    assert len(plan.jobs_to_create) == 3
    assert all(job["spec"]["suspend"] for job in plan.jobs_to_create)
    group = f"{kit.name}-{name_hash('JobSet', kit.namespace, kit.name)}"
    assert set(links(plan).values()) == {(kit.name, group)}
    suspended, _ = kit.settle(kit.snapshot(builder.copy().suspend(), features=GATE))
    resumed = reconcile(
        dataclasses.replace(suspended, jobset=builder.copy().suspend(False).build())
    )
    assert [g["metadata"]["name"] for g in resumed.pod_groups_to_create] == [group]


def test_resume_recreates_them_under_the_same_names(kit: Kit) -> None:
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    names = (
        present(running.workload)["metadata"]["name"],
        running.pod_groups[0]["metadata"]["name"],
    )
    suspended, _ = kit.settle(dataclasses.replace(running, jobset=builder.copy().suspend().build()))
    assert suspended.workload is None
    assert suspended.pod_groups == ()
    resumed = dataclasses.replace(suspended, jobset=builder.copy().suspend(False).build())
    plan = reconcile(resumed)
    assert present(plan.workload_to_create)["metadata"]["name"] == names[0]
    assert [g["metadata"]["name"] for g in plan.pod_groups_to_create] == [names[1]]


def test_elastic_scale_patches_the_computed_min_count(kit: Kit) -> None:
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE_AND_ELASTIC))
    scaled = (
        kit.jobset()
        .replicated_job("leader")
        .replicated_job("workers", replicas=2, parallelism=6, completions=6)
        .scheduling(**GANG)
    )
    plan = reconcile(dataclasses.replace(running, jobset=scaled.build()))
    patches = {(write.kind, write.name): write.patch for write in plan.scheduling_to_patch}
    group = running.pod_groups[0]["metadata"]["name"]
    assert patches[("PodGroup", group)] == {
        "spec": {"schedulingPolicy": {"gang": {"minCount": 13}}}
    }
    workload_patch = present(patches[("Workload", present(running.workload)["metadata"]["name"])])
    assert workload_patch["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {
        "gang": {"minCount": 13}
    }
    assert plan.pod_groups_to_create == ()
    assert plan.workload_to_create is None


def test_explicit_min_count_is_never_patched(kit: Kit) -> None:
    explicit = {"schedulingPolicy": {"gang": {"minCount": 3}}}
    running, _ = kit.settle(
        kit.snapshot(training(kit).scheduling(**explicit), features=GATE_AND_ELASTIC)
    )
    scaled = (
        kit.jobset()
        .replicated_job("leader")
        .replicated_job("workers", replicas=2, parallelism=6, completions=6)
        .scheduling(**explicit)
    )
    plan = reconcile(dataclasses.replace(running, jobset=scaled.build()))
    assert plan.scheduling_to_patch == ()


def test_missing_scheduling_api_warns_and_writes_no_workload(kit: Kit) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG), scheduling_api=False)
    assert plan.workload_to_create is None
    assert plan.pod_groups_to_create == ()
    (event,) = [e for e in plan.events if e.reason == "WorkloadAPIUnavailable"]
    assert event.type == "Warning"
    assert not event.after_status
    assert "scheduling.k8s.io/v1beta1" in event.note
    # The Jobs are still created, unlinked: the pods schedule one by one.
    assert len(plan.jobs_to_create) == 3
    assert all(
        "schedulingGroup" not in job["spec"]["template"]["spec"] for job in plan.jobs_to_create
    )


def test_a_jobset_with_scheduling_that_bypassed_admission_with_the_gate_off_still_runs(
    kit: Kit,
) -> None:
    plan = first_pass(kit, training(kit).scheduling(**GANG), features=FeatureGates())
    assert len(plan.jobs_to_create) == 3
    conditions = (plan.status or {}).get("conditions") or []
    assert not any(condition["type"] == "Failed" for condition in conditions)


def test_a_restart_keeps_the_workload_and_links_the_recreated_jobs_the_same_way(kit: Kit) -> None:
    builder = training(kit).failure_policy(max_restarts=1).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    failed = kit.job("workers", 0, state="failed", parallelism=4, completions=4)
    jobs = tuple(
        failed if job["metadata"]["name"] == failed["metadata"]["name"] else job
        for job in running.jobs
    )
    restarting = dataclasses.replace(running, jobs=jobs)
    plan = reconcile(restarting)
    assert plan.status is not None
    assert plan.status["restarts"] == 1
    assert plan.scheduling_to_delete == ()
    after, _ = kit.settle(restarting)
    assert after.workload == running.workload
    assert after.pod_groups == running.pod_groups
    (group,) = after.pod_groups
    linked = {
        job["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"] for job in after.jobs
    }
    assert linked == {group["metadata"]["name"]}
    assert {
        job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for job in after.jobs
    } == {"1"}


def unschedulable(group: Mapping[str, Any], message: str, **condition: str) -> dict[str, Any]:
    """The PodGroup as kube-scheduler leaves it after a failed gang attempt (trimmed as cached)."""
    return {
        **group,
        "status": {
            "conditions": [
                {
                    "type": "PodGroupInitiallyScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    **condition,
                }
            ]
        },
    }


def scheduling_events(plan: Plan) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.note) for e in plan.events if e.reason == "PodGroupUnschedulable"]


def test_an_unschedulable_pod_group_is_reported_on_the_jobset_with_the_schedulers_message(
    kit: Kit,
) -> None:
    running, _ = kit.settle(kit.snapshot(training(kit).scheduling(**GANG), features=GATE))
    (group,) = running.pod_groups
    message = "0/2 nodes are available: 2 Too many pods."
    stuck = dataclasses.replace(running, pod_groups=(unschedulable(group, message),))
    plan = reconcile(stuck)
    name = group["metadata"]["name"]
    assert scheduling_events(plan) == [
        ("Warning", "PodGroupUnschedulable", f"PodGroup {name} cannot be scheduled: {message}")
    ]
    (event,) = [e for e in plan.events if e.reason == "PodGroupUnschedulable"]
    assert not event.after_status  # the pass may write nothing else: it must still be said
    assert kit.has_no_writes(dataclasses.replace(plan, events=()))


def test_the_same_message_is_the_same_event_and_a_new_message_a_new_one(kit: Kit) -> None:
    """The recorder keys Events by their note: equal notes fold into one series."""
    running, _ = kit.settle(kit.snapshot(training(kit).scheduling(**GANG), features=GATE))
    (group,) = running.pod_groups
    first = reconcile(dataclasses.replace(running, pod_groups=(unschedulable(group, "a"),)))
    again = reconcile(dataclasses.replace(running, pod_groups=(unschedulable(group, "a"),)))
    other = reconcile(dataclasses.replace(running, pod_groups=(unschedulable(group, "b"),)))
    assert scheduling_events(first) == scheduling_events(again)
    assert scheduling_events(first) != scheduling_events(other)


def test_a_scheduled_or_erroring_pod_group_raises_no_unschedulable_event(kit: Kit) -> None:
    running, _ = kit.settle(kit.snapshot(training(kit).scheduling(**GANG), features=GATE))
    (group,) = running.pod_groups
    for condition in ({"status": "True", "reason": "Scheduled"}, {"reason": "SchedulerError"}):
        plan = reconcile(
            dataclasses.replace(running, pod_groups=(unschedulable(group, "m", **condition),))
        )
        assert scheduling_events(plan) == []
    assert scheduling_events(reconcile(running)) == []  # no condition yet


def test_each_unschedulable_group_of_a_multi_group_jobset_is_named(kit: Kit) -> None:
    builder = training(kit).scheduling(
        replicatedJobs=[{"targetReplicatedJobs": ["leader"]}, {"targetReplicatedJobs": ["workers"]}]
    )
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    leader, workers = running.pod_groups
    stuck = (leader, unschedulable(workers, "gang of 8 does not fit"))
    plan = reconcile(dataclasses.replace(running, pod_groups=stuck))
    notes = [note for _, _, note in scheduling_events(plan)]
    assert notes == [
        f"PodGroup {workers['metadata']['name']} cannot be scheduled: gang of 8 does not fit"
    ]


def test_a_suspended_jobset_reports_no_unschedulable_group(kit: Kit) -> None:
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    (group,) = running.pod_groups
    suspended = dataclasses.replace(
        running, jobset=builder.copy().suspend().build(), pod_groups=(unschedulable(group, "m"),)
    )
    assert scheduling_events(reconcile(suspended)) == []


# ------------------------------------------------------------ resume while a PodGroup terminates


def terminating(group: Mapping[str, Any], seconds_ago: float, kit: Kit) -> dict[str, Any]:
    """The PodGroup as the cache holds it while its podgroup-protection finalizer keeps it."""
    since = format_time(kit.now - timedelta(seconds=seconds_ago))
    return {**group, "metadata": {**group["metadata"], "deletionTimestamp": since}}


def quick_resume(
    kit: Kit, seconds_ago: float, features: FeatureGates = GATE
) -> tuple[Snapshot, str]:
    """A JobSet suspended and resumed at once: its Jobs still suspended (one of them lost, so the
    pass would also create one), the old PodGroup still Terminating since ``seconds_ago``."""
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=features))
    (group,) = running.pod_groups
    suspended, _ = kit.settle(respec(running, suspend=True))
    resumed = dataclasses.replace(
        respec(suspended, suspend=False),
        jobs=suspended.jobs[1:],
        pod_groups=(terminating(group, seconds_ago, kit),),
    )
    return resumed, group["metadata"]["name"]


def respec(snapshot: Snapshot, **spec: Any) -> Snapshot:
    """The snapshot's JobSet with ``spec`` fields set (None: removed), its status kept, as a user
    or Kueue changes it."""
    wire = snapshot.jobset.to_dict()
    for key, value in spec.items():
        if value is None:
            wire["spec"].pop(key, None)
        else:
            wire["spec"][key] = value
    return dataclasses.replace(snapshot, jobset=JobSet.model_validate(wire))


def resumed_jobs(plan: Plan) -> list[str]:
    return [p.name for p in plan.jobs_to_patch if p.patch.get("spec", {}).get("suspend") is False]


def suspended_status(plan: Plan) -> str | None:
    """The Suspended condition's status the Plan writes (None: no status write)."""
    if plan.status is None:
        return None
    (condition,) = [c for c in plan.status["conditions"] if c["type"] == "Suspended"]
    return str(condition["status"])


def waits(plan: Plan) -> list[tuple[str, str]]:
    return [(e.type, e.note) for e in plan.events if e.reason == "ResumeWaitsForPodGroup"]


def test_a_resume_is_held_while_the_old_pod_group_is_still_terminating(kit: Kit) -> None:
    """New pods would name the old PodGroup and keep it Terminating for as long as they run."""
    snapshot, _ = quick_resume(kit, seconds_ago=10)
    plan = reconcile(snapshot)
    assert resumed_jobs(plan) == []
    assert plan.jobs_to_create == ()
    assert plan.pod_groups_to_create == ()  # the name is still taken
    assert plan.requeue_after is not None
    assert 0 < plan.requeue_after <= 5  # looks again, but never in a hot loop
    assert waits(plan) == []  # a short wait is the normal course: nothing said
    assert suspended_status(plan) in (None, "True")  # not marked resumed: nothing resumed yet


def test_a_held_resume_is_counted_once_by_the_pass_that_resumes(kit: Kit) -> None:
    """ExecutionAttemptsTracking counts a resume from the stored Suspended condition: a held pass
    that counted it would count it again on every pass of the wait."""
    tracking = FeatureGates(workload_aware_scheduling=True, execution_attempts_tracking=True)
    snapshot, _ = quick_resume(kit, seconds_ago=10, features=tracking)
    before = snapshot.jobset.status.execution_attempts
    assert before is not None
    held = reconcile(snapshot)
    assert held.status is None or held.status.get("executionAttempts") == before
    after, _ = kit.settle(dataclasses.replace(snapshot, pod_groups=()))
    assert after.jobset.status.execution_attempts == before + 1


def test_the_held_resume_goes_on_once_the_old_pod_group_is_gone(kit: Kit) -> None:
    snapshot, name = quick_resume(kit, seconds_ago=10)
    plan = reconcile(dataclasses.replace(snapshot, pod_groups=()))
    assert [g["metadata"]["name"] for g in plan.pod_groups_to_create] == [name]
    assert len(resumed_jobs(plan)) == 2
    assert [job["metadata"]["name"] for job in plan.jobs_to_create] == [f"{kit.name}-leader-0"]
    assert set(links(plan).values()) == {(kit.name, name)}
    assert plan.requeue_after is None
    assert suspended_status(plan) == "False"


def test_a_long_wait_is_said_once_in_a_warning_whose_note_does_not_change(kit: Kit) -> None:
    """The recorder folds equal notes into one Event's series: the note names the deletion time,
    not the time waited, so a wait of many passes is one Event."""
    snapshot, name = quick_resume(kit, seconds_ago=90)
    plan = reconcile(snapshot)
    later = reconcile(dataclasses.replace(snapshot, now=kit.now + timedelta(seconds=30)))
    since = format_time(kit.now - timedelta(seconds=90))
    ((kind, note),) = waits(plan)
    assert kind == "Warning"
    assert f"PodGroup {name} (Terminating since {since})" in note
    assert "podgroup-protection-controller" in note
    assert waits(later) == waits(plan)
    assert resumed_jobs(plan) == []
    assert plan.requeue_after == 5


def test_the_event_comes_from_the_first_pass_past_a_minute(kit: Kit) -> None:
    """A pass 50 s into the wait looks again when the minute is up, to say so then."""
    snapshot, _ = quick_resume(kit, seconds_ago=58)
    plan = reconcile(snapshot)
    assert waits(plan) == []
    assert plan.requeue_after == 2


def test_a_terminating_pod_group_that_running_pods_name_holds_nothing(kit: Kit) -> None:
    """Deleted under a running gang (by hand, say), it goes only when those pods end: waiting for
    it would keep a lost Job from being replaced for as long as the JobSet runs."""
    builder = training(kit).scheduling(**GANG)
    running, _ = kit.settle(kit.snapshot(builder, features=GATE))
    (group,) = running.pod_groups
    lost_one = dataclasses.replace(
        running, jobs=running.jobs[1:], pod_groups=(terminating(group, 600, kit),)
    )
    plan = reconcile(lost_one)
    assert [job["metadata"]["name"] for job in plan.jobs_to_create] == [f"{kit.name}-leader-0"]
    assert waits(plan) == []


def test_a_suspended_jobset_is_not_held(kit: Kit) -> None:
    snapshot, _ = quick_resume(kit, seconds_ago=600)
    plan = reconcile(respec(snapshot, suspend=True))
    assert waits(plan) == []
    assert [job["metadata"]["name"] for job in plan.jobs_to_create] == [f"{kit.name}-leader-0"]


# ------------------------------------------------------------ regrouped while suspended


PER_RJOB: dict[str, Any] = {
    "replicatedJobs": [{"targetReplicatedJobs": ["leader"]}, {"targetReplicatedJobs": ["workers"]}]
}
PER_JOB_WORKERS: dict[str, Any] = {
    "replicatedJobs": [
        {"targetReplicatedJobs": ["leader"]},
        {"targetReplicatedJobs": ["workers"], "job": {"schedulingPolicy": {"gang": {}}}},
    ]
}


def regrouped(kit: Kit, before: dict[str, Any], after: dict[str, Any]) -> tuple[Snapshot, Snapshot]:
    """Run with ``before``, suspend, change to ``after`` while suspended; (suspended, resumed)."""
    running, _ = kit.settle(kit.snapshot(training(kit).scheduling(**before), features=GATE))
    suspended, _ = kit.settle(respec(running, suspend=True))
    suspended, _ = kit.settle(respec(suspended, scheduling=after))
    return suspended, respec(suspended, suspend=False)


def linked_to(snapshot: Snapshot) -> dict[str, str]:
    return {
        job["metadata"]["name"]: job["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"]
        for job in snapshot.jobs
    }


def test_a_regrouping_while_suspended_recreates_the_jobs_on_resume_linked_anew(kit: Kit) -> None:
    """A suspended Job's pod template cannot change its schedulingGroup: resumed as it is, its
    pods would wait for a PodGroup that is never created again."""
    suspended, resumed = regrouped(kit, GANG, PER_RJOB)
    old = set(linked_to(suspended).values())
    plan = reconcile(resumed)
    assert {(d.name, d.uid) for d in plan.jobs_to_delete} == {
        (job["metadata"]["name"], job["metadata"]["uid"]) for job in suspended.jobs
    }
    assert resumed_jobs(plan) == []  # deleted, not resumed
    after, _ = kit.settle(resumed)
    groups = {
        g["spec"]["workloadRef"]["templateName"]: g["metadata"]["name"] for g in after.pod_groups
    }
    assert set(groups) == {"leader", "workers"}
    assert linked_to(after) == {
        f"{kit.name}-leader-0": groups["leader"],
        f"{kit.name}-workers-0": groups["workers"],
        f"{kit.name}-workers-1": groups["workers"],
    }
    assert not old & set(groups.values())
    assert all(job["spec"].get("suspend") is False for job in after.jobs)


def test_nothing_is_recreated_while_the_jobset_stays_suspended(kit: Kit) -> None:
    suspended, _ = regrouped(kit, GANG, PER_RJOB)
    plan = reconcile(suspended)
    assert plan.jobs_to_delete == ()
    assert kit.has_no_writes(plan)


def test_only_the_jobs_whose_group_changed_are_recreated_the_others_resume(kit: Kit) -> None:
    _, resumed = regrouped(kit, PER_RJOB, PER_JOB_WORKERS)
    plan = reconcile(resumed)
    assert {d.name for d in plan.jobs_to_delete} == {
        f"{kit.name}-workers-0",
        f"{kit.name}-workers-1",
    }
    assert resumed_jobs(plan) == [f"{kit.name}-leader-0"]


def test_a_resume_under_the_same_grouping_recreates_nothing(kit: Kit) -> None:
    _, resumed = regrouped(kit, GANG, GANG)
    plan = reconcile(resumed)
    assert plan.jobs_to_delete == ()
    assert len(resumed_jobs(plan)) == 3


def test_scheduling_removed_while_suspended_recreates_the_jobs_unlinked(kit: Kit) -> None:
    running, _ = kit.settle(kit.snapshot(training(kit).scheduling(**GANG), features=GATE))
    suspended, _ = kit.settle(respec(running, suspend=True))
    resumed = respec(suspended, suspend=False, scheduling=None)
    plan = reconcile(resumed)
    assert len(plan.jobs_to_delete) == 3
    after, _ = kit.settle(resumed)
    assert all("schedulingGroup" not in job["spec"]["template"]["spec"] for job in after.jobs)


def test_with_the_gate_off_links_are_never_judged(kit: Kit) -> None:
    _, resumed = regrouped(kit, GANG, PER_RJOB)
    plan = reconcile(dataclasses.replace(resumed, features=FeatureGates()))
    assert plan.jobs_to_delete == ()
    assert len(resumed_jobs(plan)) == 3
