"""Resources of suspended JobSets (KEP-1150, gate MutablePodResourcesForSuspendedJobSets): what a
resume carries into the suspended child Jobs (docs/behaviour.md#suspend)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jobset_controller.api import FeatureGates
from jobset_controller.reconcile import JobPatch, Plan
from jobset_controller.reconcile.suspend import resource_changes

if TYPE_CHECKING:
    from tests.unit.reconcile.conftest import JobSetBuilder, Kit

RESOURCES = FeatureGates(mutable_pod_resources_for_suspended_job_sets=True)
RESIZED = {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}


def resized_jobset(kit: Kit) -> JobSetBuilder:
    """Suspended before, resumed now, with the workers' container resized meanwhile."""
    pod_spec = {
        "containers": [{"name": "main", "image": "busybox", "resources": RESIZED}],
        "initContainers": [
            {"name": "init", "image": "busybox", "resources": {"requests": {"memory": "1Gi"}}}
        ],
    }
    builder = kit.jobset().replicated_job("w", replicas=2, pod_spec=pod_spec)
    return builder.condition("Suspended", "True", "SuspendedJobs")


def job_template(main: Mapping[str, Any], init: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A suspended Job's pod template as cached (names and resources of its containers)."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": dict(main)}]}
    if init is not None:
        spec["initContainers"] = [{"name": "init", "resources": dict(init)}]
    return {"metadata": {}, "spec": spec}


def suspended_jobs(kit: Kit, template: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    return tuple(
        kit.job("w", i, suspended=True, state="pending", pod_template=template) for i in (0, 1)
    )


def resume_patches(plan: Plan) -> list[JobPatch]:
    assert plan.jobs_to_patch
    assert {patch.reason for patch in plan.jobs_to_patch} == {"resume"}
    return list(plan.jobs_to_patch)


def test_resume_gives_each_job_the_templates_requests_and_limits(kit: Kit) -> None:
    old = job_template({"requests": {"cpu": "1"}}, {"requests": {"memory": "512Mi"}})
    plan = kit.reconcile(
        resized_jobset(kit), *suspended_jobs(kit, old), service=kit.service(), features=RESOURCES
    )
    for patch in resume_patches(plan):
        assert patch.strategic
        spec = patch.patch["spec"]
        assert spec["suspend"] is False
        assert spec["template"]["spec"]["containers"] == [
            {
                "name": "main",
                "resources": {
                    "requests": {"$patch": "replace", "cpu": "2"},
                    "limits": {"$patch": "replace", "cpu": "4"},
                },
            }
        ]
        assert spec["template"]["spec"]["initContainers"] == [
            {"name": "init", "resources": {"requests": {"$patch": "replace", "memory": "1Gi"}}}
        ]


def test_resume_without_the_gate_leaves_container_resources_alone(kit: Kit) -> None:
    old = job_template({"requests": {"cpu": "1"}})
    plan = kit.reconcile(resized_jobset(kit), *suspended_jobs(kit, old), service=kit.service())
    for patch in resume_patches(plan):
        assert not patch.strategic
        assert "containers" not in str(patch.patch)


def test_unchanged_resources_keep_the_resume_a_plain_merge_patch(kit: Kit) -> None:
    same = job_template(RESIZED, {"requests": {"memory": "1Gi"}})
    plan = kit.reconcile(
        resized_jobset(kit), *suspended_jobs(kit, same), service=kit.service(), features=RESOURCES
    )
    for patch in resume_patches(plan):
        assert not patch.strategic
        assert patch.patch == {"spec": {"suspend": False}}


def test_resource_claims_of_the_job_are_never_touched() -> None:
    job = job_template({"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]})
    template = {"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]}}
    changes = resource_changes(job, template)
    assert changes == {
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"$patch": "replace"},
                    "limits": {"$patch": "replace", "cpu": "1"},
                },
            }
        ]
    }


def test_a_job_container_without_a_template_container_of_its_name_is_left_alone() -> None:
    job = job_template({"requests": {"cpu": "1"}})
    template = {
        "spec": {"containers": [{"name": "other", "resources": {"requests": {"cpu": "9"}}}]}
    }
    assert resource_changes(job, template) == {}


def test_running_jobs_get_no_resource_changes(kit: Kit) -> None:
    old = job_template({"requests": {"cpu": "1"}})
    running = tuple(kit.job("w", i, pod_template=old) for i in (0, 1))
    builder = resized_jobset(kit)
    plan = kit.reconcile(builder, *running, service=kit.service(), features=RESOURCES)
    assert plan.jobs_to_patch == ()
