"""What the controller caches and which JobSet a child's change wakes.

`trim_job` decides how much of every Job stays in memory (a tracked benchmark figure) and must
still keep each field reconcile reads; the handlers decide which key a change enqueues. Both
fail silently when wrong (a missed field reads as absent, a missed key is a JobSet that never
reconciles), so they are pinned here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from jobset_controller.api import API_VERSION, JOBSET_NAME_KEY, KIND
from jobset_controller.controller.informers import (
    OWNER_UID,
    build_informers,
    owned_by_jobset,
    owner_uid_index,
    trim_job,
    trim_to_metadata,
)
from jobset_controller.runtime.informer import Informer

OWNER = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "name": "js",
    "uid": "uid-1",
    "controller": True,
}


def meta(name: str, *, owner: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "namespace": "ns", "resourceVersion": "1", **extra}
    if owner is not None:
        data["ownerReferences"] = [owner]
    return data


def full_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(
            "js-workers-0",
            owner=OWNER,
            labels={JOBSET_NAME_KEY: "js"},
            annotations={JOBSET_NAME_KEY: "js"},
            managedFields=[{"manager": "kubectl"}],
        ),
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "suspend": False,
            "backoffLimit": 3,
            "activeDeadlineSeconds": 60,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"x": "y"}, "annotations": {"k": "v"}},
                "spec": {
                    "nodeSelector": {"pool": "a"},
                    "tolerations": [{"key": "t"}],
                    "schedulingGates": [{"name": "g"}],
                    "subdomain": "js",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "g"}]},
                        }
                    ],
                    "initContainers": [{"name": "i", "image": "busybox", "command": ["true"]}],
                    "volumes": [{"name": "v"}],
                    "restartPolicy": "Never",
                },
            },
        },
        "status": {"active": 2, "ready": 1},
    }


# ------------------------------------------------------------------------------ trimming
def test_trim_job_keeps_what_reconcile_reads() -> None:
    trimmed = trim_job(full_job())
    assert trimmed["apiVersion"] == "batch/v1"
    assert trimmed["kind"] == "Job"
    assert trimmed["metadata"]["labels"] == {JOBSET_NAME_KEY: "js"}
    assert trimmed["metadata"]["ownerReferences"] == [OWNER]
    assert trimmed["status"] == {"active": 2, "ready": 1}
    assert trimmed["spec"] == {
        "parallelism": 2,
        "completions": 2,
        "completionMode": "Indexed",
        "suspend": False,
        "backoffLimit": 3,
        "template": {
            "metadata": {"labels": {"x": "y"}, "annotations": {"k": "v"}},
            "spec": {
                "nodeSelector": {"pool": "a"},
                "tolerations": [{"key": "t"}],
                "schedulingGates": [{"name": "g"}],
                "subdomain": "js",
                "containers": [
                    {
                        "name": "c",
                        "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "g"}]},
                    }
                ],
                "initContainers": [{"name": "i"}],
            },
        },
    }


def test_trim_job_drops_managed_fields_job_annotations_and_unread_spec_fields() -> None:
    trimmed = trim_job(full_job())
    assert {"managedFields", "annotations"}.isdisjoint(trimmed["metadata"])
    pod_spec = trimmed["spec"]["template"]["spec"]
    assert {"volumes", "restartPolicy"}.isdisjoint(pod_spec)
    assert pod_spec["initContainers"] == [{"name": "i"}], "only names and resources of containers"
    assert {"activeDeadlineSeconds", "selector"}.isdisjoint(trimmed["spec"])


def test_trim_job_of_a_sparse_job_adds_only_an_empty_template() -> None:
    trimmed = trim_job({"metadata": meta("j")})
    assert trimmed == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta("j"),
        "spec": {"template": {"metadata": {}, "spec": {}}},
        "status": {},
    }


def test_trim_to_metadata_keeps_identity_labels_and_deletion_only() -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(
            "data-js-0",
            uid="u",
            labels={JOBSET_NAME_KEY: "js"},
            deletionTimestamp="2026-01-01T00:00:00Z",
            annotations={"a": "b"},
            finalizers=["kubernetes.io/pvc-protection"],
        ),
        "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"},
    }
    assert trim_to_metadata(copy.deepcopy(claim)) == {
        "metadata": {
            "name": "data-js-0",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "1",
            "labels": {JOBSET_NAME_KEY: "js"},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        }
    }


# ------------------------------------------------------------------------------ ownership
@pytest.mark.parametrize(
    ("owner", "owned"),
    [
        (OWNER, True),
        ({**OWNER, "controller": False}, False),  # an owner, but not the controller
        ({**OWNER, "kind": "Deployment"}, False),
        ({**OWNER, "apiVersion": "jobset.x-k8s.io/v1alpha1"}, False),  # another version
        (None, False),
    ],
)
def test_only_a_jobset_controller_owner_counts(owner: dict[str, Any] | None, owned: bool) -> None:
    obj = {"metadata": meta("svc", owner=owner)}
    assert owned_by_jobset(obj) is owned
    assert owner_uid_index(obj) == (["uid-1"] if owned else [])


# ------------------------------------------------------------------------------ key mapping
@pytest.fixture
def enqueued() -> list[str]:
    return []


@pytest.fixture
def informers(enqueued: list[str]) -> tuple[Informer, Informer, Informer, Informer]:
    return build_informers(None, enqueued.append)  # type: ignore[arg-type]  # never called


def exercise(informer: Informer, obj: dict[str, Any]) -> None:
    """Every handler once: add, update (old -> new), delete."""
    informer.handlers.on_add(obj)
    informer.handlers.on_update({"metadata": meta("old")}, obj)
    informer.handlers.on_delete(obj)


def test_a_jobset_change_enqueues_its_own_key(
    informers: tuple[Informer, ...], enqueued: list[str]
) -> None:
    jobsets = informers[0]
    exercise(jobsets, {"metadata": meta("js")})
    assert enqueued == ["ns/js"] * 3


@pytest.mark.parametrize("which", [1, 2], ids=["job", "service"])
def test_a_child_change_enqueues_its_jobset_owner(
    informers: tuple[Informer, ...], enqueued: list[str], which: int
) -> None:
    exercise(informers[which], {"metadata": meta("child", owner=OWNER)})
    assert enqueued == ["ns/js"] * 3


@pytest.mark.parametrize("which", [1, 2], ids=["job", "service"])
def test_a_child_without_a_jobset_owner_or_namespace_enqueues_nothing(
    informers: tuple[Informer, ...], enqueued: list[str], which: int
) -> None:
    exercise(informers[which], {"metadata": meta("orphan")})
    exercise(informers[which], {"metadata": {"name": "cluster-scoped", "ownerReferences": [OWNER]}})
    assert enqueued == []


def test_an_update_enqueues_the_owner_of_the_new_state(
    informers: tuple[Informer, ...], enqueued: list[str]
) -> None:
    jobs = informers[1]
    other = {**OWNER, "name": "other", "uid": "uid-2"}
    jobs.handlers.on_update(
        {"metadata": meta("child", owner=OWNER)}, {"metadata": meta("child", owner=other)}
    )
    assert enqueued == ["ns/other"]


def test_only_a_deleted_claim_wakes_the_jobset_named_in_its_label(
    informers: tuple[Informer, ...], enqueued: list[str]
) -> None:
    pvcs = informers[3]
    exercise(pvcs, {"metadata": meta("data-js-0", labels={JOBSET_NAME_KEY: "js"})})
    assert enqueued == ["ns/js"]  # the delete only: a new or changed claim changes no plan
    pvcs.handlers.on_delete({"metadata": meta("unlabelled")})
    assert enqueued == ["ns/js"]


def test_what_each_informer_watches_and_indexes(informers: tuple[Informer, ...]) -> None:
    jobsets, jobs, services, pvcs = informers
    assert [i.resource.plural for i in informers] == [
        "jobsets",
        "jobs",
        "services",
        "persistentvolumeclaims",
    ]
    assert jobs._label_selector == JOBSET_NAME_KEY
    assert services._keep is owned_by_jobset
    assert jobs._transform is trim_job
    assert pvcs._transform is trim_to_metadata
    job = trim_job(full_job())
    jobs.store.put(job)
    assert jobs.store.by_index(OWNER_UID, "uid-1") == [job]
    assert jobsets._label_selector is None
