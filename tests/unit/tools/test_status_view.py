"""`status`: diagnosis (table-driven), tree, grouping by owner, kubectl's kubeconfig rules."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobset_controller.runtime.kubeconfig import merge
from jobset_controller.tools.diagnosis import diagnose
from jobset_controller.tools.kubectl_context import KubeconfigError, resolve
from jobset_controller.tools.status_model import JobSetState, age
from jobset_controller.tools.status_reader import group
from jobset_controller.tools.status_tree import render

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STAMP = "2026-01-01T11:58:00Z"


def owner(uid: str) -> list[dict[str, Any]]:
    return [{"kind": "X", "name": "x", "uid": uid, "controller": True}]


def a_jobset(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicatedJobs": [
            {"name": "leader", "replicas": 1},
            {
                "name": "workers",
                "replicas": 2,
                "dependsOn": [{"name": "leader", "status": "Ready"}],
            },
        ]
    }
    spec.update(changes.pop("spec", {}))
    return {
        "metadata": {
            "name": "js",
            "namespace": "ns",
            "uid": "js-uid",
            "creationTimestamp": STAMP,
            **changes.pop("metadata", {}),
        },
        "spec": spec,
        "status": changes.pop("status", {}),
    }


def a_job(rjob: str, index: int, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"js-{rjob}-{index}",
            "uid": f"{rjob}-{index}",
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "jobset.sigs.k8s.io/job-index": str(index),
                "jobset.sigs.k8s.io/restart-attempt": "0",
            },
            "annotations": status.pop("annotations", {}),
            "ownerReferences": owner("js-uid"),
        },
        "spec": {"suspend": status.pop("suspend", False)},
        "status": status,
    }


def a_pod(job: str, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": f"{job}-0-abcde", "uid": f"{job}-pod", "ownerReferences": owner(job)},
        "spec": {"containers": [{"name": "c"}], "nodeName": extra.pop("node", "kwok-r0-n0")},
        "status": {"phase": phase, **extra},
    }
    return pod


UNSCHEDULABLE = {
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
        }
    ]
}


def an_event(reason: str, note: str, uid: str = "js-uid", kind: str = "JobSet") -> dict[str, Any]:
    return {
        "reason": reason,
        "note": note,
        "type": "Warning",
        "regarding": {"kind": kind, "name": "js", "uid": uid},
        "eventTime": "2026-01-01T11:59:00.000000Z",
    }


def state(
    js: dict[str, Any] | None = None,
    jobs: tuple[dict[str, Any], ...] = (),
    pods: tuple[dict[str, Any], ...] = (),
    events: tuple[dict[str, Any], ...] = (),
) -> JobSetState:
    return JobSetState(js or a_jobset(), jobs, pods, events, NOW)


FAILED = {
    "conditions": [
        {
            "type": "Failed",
            "status": "True",
            "reason": "FailedJobs",
            "message": "jobset failed due to one or more job failures"
            " (first failed job: js-leader-0)",
        }
    ],
    "terminalState": "Failed",
}
READY_LEADER = {"replicatedJobsStatus": [{"name": "leader", "ready": 1}]}
NOT_READY_LEADER = {"replicatedJobsStatus": [{"name": "leader", "ready": 0}]}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            state(a_jobset(status=FAILED)),
            "failed: FailedJobs: jobset failed due to one or more job failures "
            "(first failed job: js-leader-0)",
            id="failed",
        ),
        pytest.param(
            state(
                a_jobset(
                    spec={"suspend": True}, metadata={"labels": {"kueue.x-k8s.io/queue-name": "q1"}}
                )
            ),
            "suspended by Kueue: waiting for admission in queue q1",
            id="kueue",
        ),
        pytest.param(
            state(a_jobset(spec={"suspend": True})),
            "suspended (spec.suspend is true): resume it to start its pods",
            id="suspended-by-hand",
        ),
        pytest.param(
            state(
                jobs=(a_job("leader", 0),),
                events=(
                    an_event(
                        "JobCreationFailed",
                        'job "js-workers-0" creation failed with error: exceeded quota: q',
                    ),
                ),
            ),
            'JobCreationFailed: job "js-workers-0" creation failed with error: exceeded quota: q',
            id="creation-failed",
        ),
        pytest.param(
            state(
                jobs=(a_job("leader", 0),),
                pods=(a_pod("leader-0", "Pending", node="", **UNSCHEDULABLE),),
            ),
            "pod leader-0-0-abcde cannot be scheduled: "
            "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
            id="unschedulable",
        ),
        pytest.param(
            state(
                jobs=(
                    a_job(
                        "leader",
                        0,
                        annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"},
                    ),
                ),
                pods=(a_pod("leader-0", "Pending", node=""),),
            ),
            "exclusive placement per rack: Job js-leader-0 waits for its leader pod "
            "to be placed in a free domain",
            id="exclusive-waiting-for-leader",
        ),
        pytest.param(
            state(
                jobs=(
                    a_job(
                        "leader",
                        0,
                        annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"},
                    ),
                ),
                pods=(
                    a_pod("leader-0", "Pending", node="kwok-r0-n0"),
                    {
                        **a_pod("leader-0", "Pending", node=""),
                        "spec": {
                            "schedulingGates": [{"name": "jobset.sigs.k8s.io/exclusive-placement"}]
                        },
                    },
                ),
            ),
            "exclusive placement per rack: Job js-leader-0 waits for its leader pod "
            "to be placed in a free domain (1 follower pods gated)",
            id="exclusive-followers-gated",
        ),
        pytest.param(
            state(a_jobset(status=NOT_READY_LEADER), jobs=(a_job("leader", 0),)),
            "replicatedJob workers waits on dependsOn: leader to be Ready (0/1 ready)",
            id="depends-on",
        ),
        pytest.param(
            state(
                a_jobset(status=READY_LEADER),
                jobs=(a_job("leader", 0), a_job("workers", 0), a_job("workers", 1)),
                pods=(a_pod("leader-0"),),
                events=(an_event("JobCreationFailed", "old, since resolved"),),
            ),
            None,
            id="running-nothing-obvious",
        ),
    ],
)
def test_diagnosis(given: JobSetState, expected: str | None) -> None:
    assert diagnose(given) == expected


def test_tree_nests_jobs_and_pods_with_counts_conditions_and_events() -> None:
    js = a_jobset(
        status={
            "restarts": 1,
            "restartsCountTowardsMax": 1,
            "conditions": [
                {
                    "type": "RestartingJobSet",
                    "status": "False",
                    "reason": "JobsReady",
                    "message": "all jobs are ready",
                    "lastTransitionTime": STAMP,
                }
            ],
            "replicatedJobsStatus": [{"name": "leader", "ready": 1, "active": 1}],
        }
    )
    leader = a_job("leader", 0, active=1, ready=1)
    pod = a_pod("leader-0", containerStatuses=[{"ready": True, "restartCount": 3}])
    text = render(state(js, (leader,), (pod,), (an_event("Foo", "bar"),)))
    lines = text.splitlines()
    assert lines[0] == "JobSet ns/js  Running  restarts 1 (counting towards max 1)  age 2m"
    assert "    RestartingJobSet=False  JobsReady: all jobs are ready  (2m)" in lines
    assert (
        "  replicatedJob leader  replicas 1: ready 1  succeeded 0  failed 0  active 1  suspended 0"
        in lines
    )
    job_line = lines.index(
        "    Job js-leader-0  Running  attempt 0  active 1  ready 1  succeeded 0  failed 0"
    )
    assert (
        lines[job_line + 1]
        == "      Pod leader-0-0-abcde  Running  ready 1/1  restarts 3  node kwok-r0-n0"
    )
    assert "    (no Jobs)" in lines  # workers
    assert lines[-1] == "      1m  Warning  Foo  JobSet/js: bar"


def test_grouping_keeps_only_owned_children_and_their_events() -> None:
    mine = a_job("leader", 0)
    stranger = a_job("leader", 1)
    stranger["metadata"]["ownerReferences"] = owner("older-jobset")
    pod = a_pod("leader-0")
    events = [
        an_event("B", "later", uid="leader-0-pod", kind="Pod"),
        {**an_event("A", "earlier"), "eventTime": "2026-01-01T11:00:00Z"},
        an_event("C", "someone else", uid="other"),
    ]
    grouped = group(a_jobset(), [mine, stranger], [pod], events, NOW)
    assert grouped.jobs == (mine,)
    assert grouped.pods == (pod,)
    assert [e["reason"] for e in grouped.events] == ["A", "B"]


@pytest.mark.parametrize(
    ("seconds", "text"), [(5, "5s"), (125, "2m"), (3 * 3600, "3h"), (2 * 86400 + 5, "2d")]
)
def test_age(seconds: int, text: str) -> None:
    assert age(NOW - timedelta(seconds=seconds), NOW) == text


def config(current: str | None, *contexts: tuple[str, str | None]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "contexts": [
            {"name": name, "context": {"cluster": "c", **({"namespace": ns} if ns else {})}}
            for name, ns in contexts
        ]
    }
    if current:
        out["current-context"] = current
    return out


def test_kubeconfig_first_current_context_wins_and_namespace_comes_from_it() -> None:
    files = merge(
        [
            (Path("/a"), config(None, ("dev", "team-a"))),
            (Path("/b"), config("dev", ("dev", "ignored"), ("prod", None))),
            (Path("/c"), config("prod")),
        ]
    )
    target = resolve(files, context=None, namespace=None)
    assert (target.context, target.namespace) == ("dev", "team-a")
    assert target.kubeconfig == "/a:/b:/c"
    assert resolve(files, context="prod", namespace=None).namespace == "default"
    assert resolve(files, context="prod", namespace="x").namespace == "x"
    with pytest.raises(KubeconfigError, match='context "nope" does not exist'):
        resolve(files, context="nope", namespace=None)


def test_no_kubeconfig_file_is_an_error_saying_how_to_name_one() -> None:
    with pytest.raises(KubeconfigError, match="no kubeconfig found"):
        resolve(merge([]), context=None, namespace=None)


def test_tree_says_when_a_suspended_jobsets_jobs_are_deferred_to_its_first_resume() -> None:
    status = {"replicatedJobsStatus": [{"name": "leader", "suspended": 1}, {"name": "workers"}]}
    js = a_jobset(spec={"suspend": True}, status=status)
    lines = render(state(js)).splitlines()
    leader = lines.index(
        "  replicatedJob leader  replicas 1: ready 0  succeeded 0  failed 0  active 0  suspended 1"
    )
    assert lines[leader + 1] == "    (no Jobs yet: created at the first resume, deferredChildren)"
    assert "    (no Jobs)" in lines  # workers wait for leader: not counted, not deferred


def test_tree_shows_the_pod_groups_with_their_conditions() -> None:
    js = a_jobset(spec={"scheduling": {"schedulingPolicy": {"gang": {}}}})
    pod_group = {
        "metadata": {"name": "js-0123456789", "ownerReferences": owner("js-uid")},
        "spec": {
            "workloadRef": {"workloadName": "js-0123456789", "templateName": "js"},
            "schedulingPolicy": {"gang": {"minCount": 3}},
        },
        "status": {"conditions": [{"type": "PodGroupScheduled", "status": "False"}]},
    }
    text = render(dataclasses.replace(state(js, (), (), ()), pod_groups=(pod_group,)))
    assert (
        "    PodGroup js-0123456789  template js  gang minCount 3  PodGroupScheduled=False"
        in text.splitlines()
    )


def test_tree_says_when_the_scheduling_api_is_not_served() -> None:
    js = a_jobset(spec={"scheduling": {}})
    text = render(dataclasses.replace(state(js, (), (), ()), scheduling_api=False))
    assert "  PodGroups: none (the API server does not serve scheduling.k8s.io/v1beta1)" in text


# --- the restart section (docs/behaviour.md#restart-timeline) ----------------------------------


def restarting_jobset(attempt: int = 1, ready: int = 0) -> dict[str, Any]:
    return a_jobset(
        status={
            "restarts": attempt,
            "conditions": [
                {
                    "type": "RestartingJobSet",
                    "status": "True",
                    "reason": "DefaultFailurePolicy",
                    "message": "applying RestartJobSet failure policy action",
                    "lastTransitionTime": "2026-01-01T11:57:00Z",
                }
            ],
            "replicatedJobsStatus": [
                {"name": "leader", "ready": ready},
                {"name": "workers", "ready": 0},
            ],
        }
    )


def at_attempt(job: dict[str, Any], attempt: int) -> dict[str, Any]:
    job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] = str(attempt)
    return job


def test_a_restart_waiting_for_old_pods_names_them_and_how_long_past_their_grace() -> None:
    stuck = a_pod("leader-0", node="dead-node")
    stuck["metadata"]["deletionTimestamp"] = "2026-01-01T11:58:00Z"
    state = JobSetState(
        restarting_jobset(),
        (a_job("leader", 0), at_attempt(a_job("workers", 0), 1)),
        (stuck,),
        (),
        NOW,
    )
    text = render(state)
    assert "  Restart 1 in progress for 3m (teardown): 1 of 2 Jobs are the old attempt's\n" in text
    assert (
        "    pod leader-0-0-abcde Terminating on node dead-node, 2m past its grace period\n" in text
    )


def test_a_restart_creating_and_then_waiting_for_readiness_says_how_far_it_is() -> None:
    jobs = [at_attempt(a_job("leader", 0), 1), at_attempt(a_job("workers", 0), 1)]
    creating = render(JobSetState(restarting_jobset(), tuple(jobs), (), (), NOW))
    assert "Restart 1 in progress for 3m (create): 2 of 3 new Jobs created" in creating
    jobs.append(at_attempt(a_job("workers", 1), 1))
    readying = render(JobSetState(restarting_jobset(ready=1), tuple(jobs), (), (), NOW))
    assert "Restart 1 in progress for 3m (ready): 1 of 3 Jobs ready" in readying


def test_the_last_completed_restart_comes_from_its_event() -> None:
    done = {
        "reason": "RestartCompleted",
        "type": "Normal",
        "note": "restart 1 (RestartJobSet after js-workers-1 failed) completed in 40.0s: ...",
        "eventTime": "2026-01-01T10:00:00.000000Z",
        "regarding": {"kind": "JobSet", "name": "js"},
    }
    text = render(JobSetState(a_jobset(), (), (), (done,), NOW))
    assert (
        "  Last restart: restart 1 (RestartJobSet after js-workers-1 failed) completed in 40.0s:"
        " ... (2h ago)\n"
    ) in text
