"""MultiKueue across two local clusters, each with its own control plane, our controller and Kueue.

The manager is the package's cluster; the worker is a second FullCluster (`kueue_worker`).
A JobSet created in the manager with `spec.managedBy: kueue.x-k8s.io/multikueue` belongs to
Kueue there: our manager-side controller must create nothing and write no status. Kueue copies it
to the worker (without managedBy), where our controller runs it; Kueue copies the worker's status
back, so the user reads completion in the manager.

Faults found: none in the controller (managedBy is honoured on both sides). Harness: the worker's
kubeconfig must carry its credentials inline (MultiKueue refuses file paths), and two controllers
on one host must not share the default webhook port or certificate directory (conftest).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from jobset_controller.api.constants import FIELD_MANAGER
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kueue import (
    KUEUE_API,
    MULTIKUEUE_CHECK_CONTROLLER,
    MULTIKUEUE_CONTROLLER,
    Kueue,
    inline_kubeconfig,
)
from jobset_controller_dev.envtest.kueue_objects import (
    KueueNamespace,
    is_true,
    jobset,
    rjob,
)
from jobset_controller_dev.envtest.kwok_stages import RUN_DURATION_ANNOTATION
from jobset_controller_dev.envtest.nodes import RACK_LABEL

pytestmark = pytest.mark.kueue


def test_multikueue_runs_the_jobset_in_the_worker_and_reports_back(
    kenv: KueueNamespace, kueue: Kueue, kueue_worker: tuple[FullCluster, Kueue]
) -> None:
    """Manager: quota reserved, MultiKueue admission check dispatches to the worker; our
    controller there leaves the JobSet alone (no Jobs, no status writes of its own). Worker: a copy
    without managedBy, admitted by the worker's Kueue, run by our controller to completion (its
    Jobs and pods are checked while the pods run, 10 s: once the Workload finishes MultiKueue
    deletes the worker's copy, and with it its Jobs and pods). The manager's JobSet then shows the
    worker's Completed status and its Workload is Finished."""
    worker_cluster, _ = kueue_worker
    manager = kenv.cluster
    wenv = KueueNamespace(worker_cluster, worker_cluster.create_namespace(kenv.ns))
    try:
        # Worker: an ordinary queue with the same LocalQueue name.
        w_flavor = wenv.flavor("rack2", {RACK_LABEL: "rack-2"})
        wenv.local_queue("lq", wenv.cluster_queue("cq", [(w_flavor, "8")]))

        # Manager: the worker's kubeconfig (inline credentials, as MultiKueue requires) in a
        # Secret in Kueue's namespace, the cluster, config and admission check.
        secret = kenv.name("worker")
        kenv.create(
            f"/api/v1/namespaces/{kueue.namespace}/secrets",
            {
                "metadata": {"name": secret},
                "data": {
                    "kubeconfig": base64.b64encode(
                        inline_kubeconfig(worker_cluster).encode()
                    ).decode()
                },
            },
        )
        mk_cluster = kenv.cluster_object(
            "multikueueclusters",
            {
                "kind": "MultiKueueCluster",
                "metadata": {"name": kenv.name("worker")},
                "spec": {
                    "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret}}
                },
            },
        )
        mk_config = kenv.cluster_object(
            "multikueueconfigs",
            {
                "kind": "MultiKueueConfig",
                "metadata": {"name": kenv.name("mk")},
                "spec": {"clusters": [mk_cluster]},
            },
        )
        check = kenv.cluster_object(
            "admissionchecks",
            {
                "kind": "AdmissionCheck",
                "metadata": {"name": kenv.name("mk")},
                "spec": {
                    "controllerName": MULTIKUEUE_CHECK_CONTROLLER,
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": mk_config,
                    },
                },
            },
        )
        manager.wait_for(
            f"{KUEUE_API}/multikueueclusters/{mk_cluster}",
            lambda c: is_true(c, "Active"),
            timeout=60,
            what="MultiKueueCluster Active (Kueue reached the worker)",
        )
        manager.wait_for(
            f"{KUEUE_API}/admissionchecks/{check}",
            lambda c: is_true(c, "Active"),
            timeout=60,
            what="AdmissionCheck Active",
        )
        m_flavor = kenv.flavor("default", {})
        kenv.local_queue(
            "lq", kenv.cluster_queue("cq", [(m_flavor, "8")], admission_checks=[check])
        )

        body = jobset(
            "remote",
            rjob("workers", replicas=2, annotations={RUN_DURATION_ANNOTATION: "10s"}),
            managedBy=MULTIKUEUE_CONTROLLER,
        )
        created = kenv.create_jobset(body)
        assert created["spec"]["managedBy"] == MULTIKUEUE_CONTROLLER

        copy = wenv.wait_jobset("remote", bool, "copied to the worker", timeout=60)
        assert copy["spec"].get("managedBy") is None
        pods = wenv.wait_pods(
            "remote",
            lambda ps: len(ps) == 2 and all(p["spec"].get("nodeName") for p in ps),
            "all scheduled in the worker",
        )
        assert len(wenv.jobs("remote")) == 2
        racks = wenv.node_racks()
        assert {racks[p["spec"]["nodeName"]] for p in pods} == {"rack-2"}

        js = kenv.wait_jobset(
            "remote",
            lambda j: (j.get("status") or {}).get("terminalState") == "Completed",
            "completion copied back to the manager",
            timeout=90,
        )
        assert is_true(js, "Completed")
        # Only the worker's controller writes this status (checked below): both pods succeeded.
        [workers] = js["status"]["replicatedJobsStatus"]
        assert (workers["name"], workers["succeeded"]) == ("workers", 2), workers
        # The worker's copy shows the same, unless MultiKueue has already deleted it (404: {}).
        done = wenv.wait_jobset(
            "remote",
            lambda j: not j or (j.get("status") or {}).get("terminalState") == "Completed",
            "completed in the worker, or deleted once finished",
        )
        if done:
            assert done["status"]["replicatedJobsStatus"] == js["status"]["replicatedJobsStatus"]
        kenv.wait_workload("remote", lambda w: is_true(w, "Finished"), "manager Workload finished")

        # Our controller in the manager left it alone: no Jobs, no Service, no status of its own.
        assert kenv.jobs("remote") == []
        status, _ = manager.request("GET", f"/api/v1/namespaces/{kenv.ns}/services/remote")
        assert status == 404
        assert ours_wrote_status(js) is False, js["metadata"].get("managedFields")
    finally:
        wenv.cleanup()


def ours_wrote_status(js: dict[str, Any]) -> bool:
    """Whether our controller's field manager (upstream's name, FIELD_MANAGER) owns status
    fields."""
    return any(
        entry.get("manager") == FIELD_MANAGER and entry.get("subresource") == "status"
        for entry in js["metadata"].get("managedFields") or ()
    )
