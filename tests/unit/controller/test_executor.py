"""The Plan executor's ordering and accounting, with an in-memory stand-in for the API client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jobset_controller.controller.executor import (
    ExecutionError,
    Executor,
    JobSetMetrics,
    _summary,
)
from jobset_controller.reconcile import (
    WRITE_ORDER,
    Event,
    JobDelete,
    JobPatch,
    Plan,
    SchedulingWrite,
    WritePhase,
)
from jobset_controller.runtime.client import AlreadyExists, ApiError, Conflict, Forbidden, NotFound
from jobset_controller.runtime.events import ObjectRef

JOBSET = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "js", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
    "spec": {"replicatedJobs": []},
}
STATUS = {"restarts": 0, "terminalState": "Completed"}


class FakeClient:
    """Records calls; `fail` maps (verb, path suffix) to the error to raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.replaced: list[Any] = []
        self.fail: dict[tuple[str, str], ApiError] = {}

    def _maybe_fail(self, verb: str, path: str) -> None:
        self.calls.append((verb, path))
        for (fverb, suffix), error in self.fail.items():
            if fverb == verb and path.endswith(suffix):
                raise error

    async def create(self, path: str, body: Any, **params: Any) -> dict[str, Any]:
        self._maybe_fail("create", f"{path}/{body['metadata']['name']}")
        return dict(body)

    async def replace(self, path: str, body: Any) -> dict[str, Any]:
        self._maybe_fail("replace", path)
        self.replaced.append(body)
        return dict(body)

    async def merge_patch(self, path: str, patch: Any) -> dict[str, Any]:
        self._maybe_fail("patch", path)
        return {"metadata": {"resourceVersion": "99"}}

    async def delete(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self._maybe_fail("delete", path)
        return {}

    async def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "", **_: Any
    ) -> dict[str, Any]:
        self._maybe_fail(f"{method.lower()} {content_type}", path)
        return {"metadata": {"resourceVersion": "99"}}


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, regarding: ObjectRef, type: str, reason: str, note: str) -> None:
        self.events.append((type, reason, note))


def job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {}}


@pytest.fixture
def parts() -> tuple[FakeClient, FakeRecorder, CollectorRegistry, Executor]:
    client, recorder, registry = FakeClient(), FakeRecorder(), CollectorRegistry()
    executor = Executor(client, recorder, JobSetMetrics(registry))  # type: ignore[arg-type]
    return client, recorder, registry, executor


def completed_total(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "jobset_completed_total", {"jobset_name": "js", "namespace": "ns"}
    )
    return value or 0.0


async def test_writes_happen_in_the_fixed_order(parts: Any) -> None:
    client, recorder, _, executor = parts
    plan = Plan(
        jobs_to_delete=(JobDelete(name="old", uid="u-old"),),
        jobs_to_create=(job("new"),),
        service_to_create={"metadata": {"name": "js"}},
        pvcs_to_create=({"metadata": {"name": "data-js"}},),
        jobs_to_patch=(JobPatch(name="p", uid="u-p", resource_version="3", patch={"spec": {}}),),
        scheduling_to_delete=(SchedulingWrite("PodGroup", "gone", uid="u-g"),),
        workload_to_create={"metadata": {"name": "js-w"}},
        pod_groups_to_create=({"metadata": {"name": "js-pg"}},),
        scheduling_to_patch=(SchedulingWrite("PodGroup", "js-pg2", patch={"spec": {}}),),
        status=STATUS,
        completed=True,
        events=(Event(type="Normal", reason="AllJobsCompleted", note="done", after_status=True),),
    )
    await executor.execute(JOBSET, plan)
    targets = [(verb, path.rsplit("/", 2)[-2]) for verb, path in client.calls]
    assert targets == [
        ("delete", "jobs"),
        ("delete", "podgroups"),  # a suspend's Workload and PodGroups go with the other deletes
        ("create", "services"),  # the Service and the claims before the Jobs that need them
        ("create", "persistentvolumeclaims"),
        ("create", "workloads"),  # the Workload, its PodGroups, then their minCount patches:
        ("create", "podgroups"),  # all before the Jobs whose pods name the PodGroups
        ("patch", "podgroups"),
        ("create", "jobs"),
        ("patch", "jobs"),
        ("replace", "js"),  # .../jobsets/js/status, last
    ]
    assert recorder.events == [("Normal", "AllJobsCompleted", "done")]
    # The order above is the one the Plan declares, and the executor takes it from there.
    phase_of_call = {
        ("delete", "jobs"): WritePhase.DELETE_JOBS,
        ("delete", "podgroups"): WritePhase.DELETE_SCHEDULING,
        ("create", "services"): WritePhase.CREATE_SERVICE,
        ("create", "persistentvolumeclaims"): WritePhase.CREATE_PVCS,
        ("create", "workloads"): WritePhase.CREATE_WORKLOAD,
        ("create", "podgroups"): WritePhase.CREATE_POD_GROUPS,
        ("patch", "podgroups"): WritePhase.PATCH_SCHEDULING,
        ("create", "jobs"): WritePhase.CREATE_JOBS,
        ("patch", "jobs"): WritePhase.PATCH_JOBS,
    }
    assert tuple(phase_of_call[target] for target in targets[:-1]) == WRITE_ORDER


async def test_the_status_write_is_conditional_on_the_plans_resource_version(parts: Any) -> None:
    client, _, _, executor = parts
    await executor.execute(JOBSET, Plan(status=STATUS, status_resource_version="6"))
    (body,) = client.replaced
    assert body["metadata"]["resourceVersion"] == "6"
    assert body["status"] == STATUS


async def test_a_conflicting_status_write_counts_nothing_and_emits_nothing(parts: Any) -> None:
    client, recorder, registry, executor = parts
    plan = Plan(
        status=STATUS,
        completed=True,
        events=(Event(type="Normal", reason="AllJobsCompleted", note="done", after_status=True),),
    )
    client.fail[("replace", "/status")] = Conflict(409, {"reason": "Conflict"})
    with pytest.raises(Conflict):
        await executor.execute(JOBSET, plan)
    assert completed_total(registry) == 0
    assert recorder.events == []
    del client.fail[("replace", "/status")]
    await executor.execute(JOBSET, plan)
    assert completed_total(registry) == 1
    assert recorder.events == [("Normal", "AllJobsCompleted", "done")]


def counter(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(name, {"jobset_name": "js", "namespace": "ns"})
    return value or 0.0


async def test_a_deadline_failure_is_counted_once_beside_the_failure_after_its_write(
    parts: Any,
) -> None:
    """KEP-1186's counter follows jobset_failed_total: nothing for a conflicting write, one for
    the retried write that succeeds, none for the Plans without the transition."""
    client, _, registry, executor = parts
    failed = {"restarts": 0, "terminalState": "Failed"}
    plan = Plan(status=failed, failed=True, deadline_exceeded=True)
    client.fail[("replace", "/status")] = Conflict(409, {"reason": "Conflict"})
    with pytest.raises(Conflict):
        await executor.execute(JOBSET, plan)
    assert counter(registry, "jobset_active_deadline_exceeded_total") == 0
    del client.fail[("replace", "/status")]
    await executor.execute(JOBSET, plan)
    await executor.execute(JOBSET, Plan(status=failed))  # a later write of the failed JobSet
    await executor.execute(JOBSET, Plan(status=failed, failed=True))  # another failure reason
    assert counter(registry, "jobset_active_deadline_exceeded_total") == 1
    assert counter(registry, "jobset_failed_total") == 2


async def test_a_status_write_for_a_jobset_deleted_meanwhile_ends_the_pass_quietly(
    parts: Any,
) -> None:
    """A JobSet deleted while its pass ran: the 404 of its status write is not an error (no
    retry, no error log), and nothing is counted or announced for an object that is gone."""
    client, recorder, registry, executor = parts
    plan = Plan(
        status=STATUS,
        completed=True,
        delete_jobset=True,
        events=(Event(type="Normal", reason="AllJobsCompleted", note="done", after_status=True),),
    )
    client.fail[("replace", "/status")] = NotFound(404, {"reason": "NotFound"})
    assert await executor.execute(JOBSET, plan) is None
    assert completed_total(registry) == 0
    assert recorder.events == []
    assert not [call for call in client.calls if call[0] == "delete"]


async def test_already_existing_jobs_are_success(parts: Any) -> None:
    client, recorder, _, executor = parts
    client.fail[("create", "/jobs/a")] = AlreadyExists(409, {"reason": "AlreadyExists"})
    await executor.execute(JOBSET, Plan(jobs_to_create=(job("a"), job("b"))))
    assert recorder.events == []


async def test_refused_creates_emit_job_creation_failed_and_stop_before_the_status(
    parts: Any,
) -> None:
    client, recorder, _, executor = parts
    client.fail[("create", "/jobs/b")] = Forbidden(403, {"message": "exceeded quota"})
    plan = Plan(jobs_to_create=(job("a"), job("b")), status={"restarts": 0})
    with pytest.raises(ExecutionError):
        await executor.execute(JOBSET, plan)
    assert recorder.events == [
        ("Warning", "JobCreationFailed", 'job "b" creation failed with error: exceeded quota')
    ]
    assert ("replace", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/js/status") not in (
        client.calls
    )


def terminating() -> Forbidden:
    """The API server's answer to a create in a namespace being deleted."""
    return Forbidden(
        403,
        {
            "reason": "Forbidden",
            "message": 'jobs.batch "x" is forbidden: unable to create new content in namespace '
            "ns because it is being terminated",
            "details": {
                "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]
            },
        },
    )


class RoundTrips(FakeClient):
    """Each create is answered a loop turn later, as over a connection: the creates in flight
    are the ones the parallelism lets start, not all of them."""

    async def create(self, path: str, body: Any, **params: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return await super().create(path, body, **params)


async def test_a_create_refused_for_a_terminating_namespace_ends_the_pass_quietly() -> None:
    """No event, no error (so no retry), the pass's other creates cancelled, no status write."""
    client, recorder = RoundTrips(), FakeRecorder()
    executor = Executor(
        client,  # type: ignore[arg-type]
        recorder,  # type: ignore[arg-type]
        JobSetMetrics(CollectorRegistry()),
        create_parallelism=5,
    )
    jobs = tuple(job(f"j{index}") for index in range(250))
    for each in jobs:
        client.fail[("create", f"/jobs/{each['metadata']['name']}")] = terminating()
    plan = Plan(jobs_to_create=jobs, status={"restarts": 0})
    assert await executor.execute(JOBSET, plan) is None
    creates = [path for verb, path in client.calls if verb == "create"]
    assert 1 <= len(creates) <= 5  # what was in flight when the first refusal came, no more
    assert recorder.events == []
    assert not [call for call in client.calls if call[0] == "replace"]


@pytest.mark.parametrize("suffix", ["/services/js", "/persistentvolumeclaims/c"])
async def test_a_service_or_claim_refused_for_a_terminating_namespace_ends_the_pass_quietly(
    parts: Any, suffix: str
) -> None:
    client, recorder, _, executor = parts
    client.fail[("create", suffix)] = terminating()
    claim = {"metadata": {"name": "c"}}
    plan = Plan(
        service_to_create={"metadata": {"name": "js"}},
        pvcs_to_create=(claim,),
        jobs_to_create=(job("j"),),
        status={"restarts": 0},
    )
    assert await executor.execute(JOBSET, plan) is None
    assert recorder.events == []
    assert not [path for verb, path in client.calls if path.endswith("/jobs/j")]


async def test_a_plain_403_on_create_is_still_an_error_with_its_event(parts: Any) -> None:
    """Only the NamespaceTerminating cause is quiet: an authorizer's or a quota's 403 is not."""
    client, recorder, _, executor = parts
    refusal = terminating()
    refusal.body.pop("details")
    client.fail[("create", "/jobs/a")] = Forbidden(403, refusal.body)
    with pytest.raises(ExecutionError):
        await executor.execute(JOBSET, Plan(jobs_to_create=(job("a"),)))
    assert [reason for _, reason, _ in recorder.events] == ["JobCreationFailed"]


async def test_deleting_a_job_that_is_already_gone_is_success(parts: Any) -> None:
    client, recorder, _, executor = parts
    client.fail[("delete", "/jobs/gone")] = NotFound(404, {})
    await executor.execute(JOBSET, Plan(jobs_to_delete=(JobDelete(name="gone", uid="u"),)))
    assert [call for call in client.calls if call[0] == "delete"] == [
        ("delete", "/apis/batch/v1/namespaces/ns/jobs/gone")
    ]
    assert recorder.events == []


async def test_resume_clears_start_time_before_patching_the_template(parts: Any) -> None:
    client, _, _, executor = parts
    patch = JobPatch(
        name="j", uid="u", resource_version="3", patch={"spec": {"suspend": False}},
        clear_start_time=True,
    )  # fmt: skip
    await executor.execute(JOBSET, Plan(jobs_to_patch=(patch,)))
    assert [path.rsplit("/", 1)[-1] for _, path in client.calls] == ["status", "j"]


STRATEGIC = "patch application/strategic-merge-patch+json"


async def test_a_resume_carrying_container_resources_is_a_strategic_merge_patch(
    parts: Any,
) -> None:
    client, _, _, executor = parts
    resources = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}
    patch = JobPatch(
        name="j", uid="u", resource_version="3", reason="resume", strategic=True,
        patch={"spec": {"suspend": False, "template": {"spec": resources}}},
    )  # fmt: skip
    await executor.execute(JOBSET, Plan(jobs_to_patch=(patch,)))
    assert client.calls == [(STRATEGIC, "/apis/batch/v1/namespaces/ns/jobs/j")]


async def test_a_refused_resource_propagation_records_failed_resource_propagation(
    parts: Any,
) -> None:
    client, recorder, _, executor = parts
    client.fail[(STRATEGIC, "/jobs/j")] = ApiError(422, {"message": "field is immutable"})
    patch = JobPatch(
        name="j", uid="u", resource_version="3", reason="resume", strategic=True,
        patch={"spec": {"suspend": False}},
    )  # fmt: skip
    with pytest.raises(ExecutionError):
        await executor.execute(JOBSET, Plan(jobs_to_patch=(patch,), status=STATUS))
    assert recorder.events == [
        (
            "Warning",
            "FailedResourcePropagation",
            "Failed to propagate mutated resources to child Job: field is immutable. "
            "Ensure MutablePodResourcesForSuspendedJobs is enabled on the API server.",
        )
    ]
    assert client.replaced == [], "no status write after a refused resume"


@pytest.mark.parametrize(
    ("failing", "plan", "reason"),
    [
        (
            ("create", "/services/js"),
            Plan(service_to_create={"metadata": {"name": "js"}}),
            "HeadlessServiceCreationFailed",
        ),
        (
            ("create", "/persistentvolumeclaims/data-js"),
            Plan(pvcs_to_create=({"metadata": {"name": "data-js"}},)),
            "PVCCreationFailed",
        ),
        (
            ("create", "/workloads/js-w"),
            Plan(workload_to_create={"metadata": {"name": "js-w"}}, jobs_to_create=(job("j"),)),
            "WorkloadCreationFailed",
        ),
        (
            ("create", "/podgroups/js-pg"),
            Plan(
                pod_groups_to_create=({"metadata": {"name": "js-pg"}},), jobs_to_create=(job("j"),)
            ),
            "PodGroupCreationFailed",
        ),
    ],
    ids=["service", "pvc", "workload", "pod group"],
)
async def test_a_refused_service_or_claim_emits_its_warning_and_stops(
    parts: Any, failing: tuple[str, str], plan: Plan, reason: str
) -> None:
    client, recorder, _, executor = parts
    client.fail[failing] = Forbidden(403, {"message": "exceeded quota"})
    with pytest.raises(ExecutionError):
        await executor.execute(JOBSET, plan)
    assert recorder.events == [("Warning", reason, "exceeded quota")]
    assert not any(path.endswith("/jobs/j") for _, path in client.calls), "no pod without its group"


async def test_a_suspends_scheduling_deletes_use_the_v1beta1_paths_pod_groups_first(
    parts: Any,
) -> None:
    client, _, _, executor = parts
    plan = Plan(
        scheduling_to_delete=(
            SchedulingWrite("PodGroup", "js-pg", uid="u-pg"),
            SchedulingWrite("Workload", "js-w", uid="u-w"),
        ),
    )
    await executor.execute(JOBSET, plan)
    assert client.calls == [
        ("delete", "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/js-pg"),
        ("delete", "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/workloads/js-w"),
    ]


def test_a_failed_batch_raises_its_first_line_and_a_count_not_every_line() -> None:
    lines = [f'job "js-w-{i}" creation failed with error: quota' for i in range(1000)]
    assert _summary(lines, 1000) == (
        '1000 of 1000 Job creates failed; the first: job "js-w-0" creation failed with error: quota'
    )
    assert _summary(lines[:1], 3) == 'job "js-w-0" creation failed with error: quota'
