"""Kubeflow Trainer v2.0.0 as a real client of our controller (marker `trainer`).

Trainer's manager (`envtest/trainer.py`, built by hack/trainer.sh) runs with its webhooks beside
`jobset-controller run` on the full local cluster, with our four JobSet and pod webhooks
registered by URL. A TrainJob becomes a JobSet by Trainer's server-side apply; the TrainJob's
conditions are Trainer's copy of the JobSet's. The tests pin what Trainer and its users see:

- Trainer's own e2e: the torch-distributed and mpi-distributed ClusterTrainingRuntimes it ships
  complete with exactly the conditions its e2e suite expects; the MPI JobSet's
  replicatedJobsStatus is in upstream's order and Trainer's apply owns `configMap` whole (the
  CRD's atomic structs, as upstream's);
- multi-node with GPUs; a failure with the JobSet's reason and message; restarts up to
  maxRestarts, then ReachedMaxRestarts; suspend and resume; a JobSet update our webhook refuses
  while suspended (Trainer reports it as an Event) beside one it accepts; deletion of the
  TrainJob collecting the JobSet and everything under it.

The whole module shares one cluster (`trainer_cluster`, module-scoped): one xdist group. Each
test has a namespace of its own. Kueue is not part of it: Trainer v2.0.0 has no Kueue integration
and Kueue v0.19's TrainJob integration needs Trainer v2.2's API (envtest/trainer.py).
"""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from jobset_controller.api.constants import FIELD_MANAGER as JOBSET_FIELD_MANAGER
from jobset_controller_dev.envtest.controller import local_controller
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
    RUN_FOREVER_ANNOTATION,
)
from jobset_controller_dev.envtest.nodes import RACK_LABEL
from jobset_controller_dev.envtest.processes import processes_mentioning
from jobset_controller_dev.envtest.trainer import (
    FIELD_MANAGER as TRAINER_FIELD_MANAGER,
)
from jobset_controller_dev.envtest.trainer import (
    TRAINER_API,
    TRAINER_API_VERSION,
    Trainer,
    cluster_training_runtime,
)
from jobset_controller_dev.envtest.webhooks import upstream_webhook_configurations

pytestmark = pytest.mark.trainer

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
MERGE = "application/merge-patch+json"
GPU = "nvidia.com/gpu"
# Upstream's texts (sigs.k8s.io/jobset constants), which Trainer copies into the TrainJob.
COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = "FailedJobs", "jobset failed due to one or more job failures"
MAX_RESTARTS = "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts"
# Trainer's own (its constants and API).
SUSPENDED = ("Suspended", "TrainJob is suspended")
RESUMED = ("Resumed", "TrainJob is resumed")
RECONCILE_FAILED = "TrainJobResourcesCreationFailed"
Predicate = Callable[[dict[str, Any]], object]


@dataclass(frozen=True)
class TrainerCluster:
    cluster: FullCluster
    trainer: Trainer


@pytest.fixture(scope="module")
def trainer_cluster() -> Iterator[TrainerCluster]:
    """A FullCluster with our controller, its four webhooks registered for every namespace, and
    Trainer with its webhooks and its torch and MPI runtimes; on exit nothing it started runs."""
    cluster = FullCluster(keep_workdir=os.environ.get("JOBSET_E2E_KEEP_WORKDIR") == "1").start()
    marker = str(cluster.workdir)
    try:
        with local_controller(cluster, stem="jobset-controller") as ours:
            base = f"https://127.0.0.1:{ours.webhook_port}"
            for path, body in upstream_webhook_configurations(base, cluster.ca.cert_pem):
                status, reply = cluster.request("POST", path, body)
                assert status == 201, reply
            trainer = Trainer(cluster).start()
            try:
                yield TrainerCluster(cluster, trainer)
            finally:
                trainer.stop()
    finally:
        cluster.stop()
        leftovers = processes_mentioning(marker)
        assert leftovers == [], f"processes left running after the cluster stopped: {leftovers}"


class Namespace:
    """One test's namespace: TrainJobs, TrainingRuntimes and what they make, read and waited on."""

    def __init__(self, env: TrainerCluster, name: str) -> None:
        self.cluster = env.cluster
        self.trainer = env.trainer
        self.ns = name

    # ------------------------------------------------------------------ writing
    def create(self, collection: str, body: Mapping[str, Any]) -> dict[str, Any]:
        status, reply = self.cluster.request("POST", collection, dict(body))
        assert status == 201, f"POST {collection}: {status} {reply}"
        return reply

    def trainjob(
        self, name: str, runtime: str, kind: str = "ClusterTrainingRuntime", **spec: Any
    ) -> dict[str, Any]:
        return self.create(
            f"{TRAINER_API}/namespaces/{self.ns}/trainjobs",
            {
                "apiVersion": TRAINER_API_VERSION,
                "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": runtime, "kind": kind}, **spec},
            },
        )

    def patch_trainjob(self, name: str, spec: Mapping[str, Any]) -> None:
        path = f"{TRAINER_API}/namespaces/{self.ns}/trainjobs/{name}"
        status, reply = self.cluster.request("PATCH", path, {"spec": dict(spec)}, MERGE)
        assert status == 200, f"PATCH {path}: {status} {reply}"

    def runtime_from_torch(
        self,
        name: str,
        *,
        pod_annotations: Mapping[str, str],
        job_spec: Mapping[str, Any] | None = None,
        jobset_spec: Mapping[str, Any] | None = None,
    ) -> str:
        """A TrainingRuntime in this namespace: Trainer's torch-distributed with kwok's
        annotations in the pod template (how a simulated pod fails or runs forever) and extra
        Job or JobSet spec fields (backoffLimit, failurePolicy)."""
        runtime = copy.deepcopy(cluster_training_runtime(self.trainer.bin_dir, "torch-distributed"))
        runtime["kind"] = "TrainingRuntime"
        runtime["metadata"] = {"name": name, "namespace": self.ns}
        template = runtime["spec"]["template"]["spec"]
        template.update(jobset_spec or {})
        (rjob,) = template["replicatedJobs"]
        rjob["template"]["spec"].update(job_spec or {})
        pod = rjob["template"]["spec"]["template"]
        pod.setdefault("metadata", {})["annotations"] = dict(pod_annotations)
        self.create(f"{TRAINER_API}/namespaces/{self.ns}/trainingruntimes", runtime)
        return name

    # ------------------------------------------------------------------ reading
    def get_trainjob(self, name: str) -> dict[str, Any]:
        status, body = self.cluster.request(
            "GET", f"{TRAINER_API}/namespaces/{self.ns}/trainjobs/{name}"
        )
        assert status == 200, body
        return body

    def get_jobset(self, name: str) -> dict[str, Any] | None:
        status, body = self.cluster.request("GET", f"{JOBSETS.format(ns=self.ns)}/{name}")
        return body if status == 200 else None

    def items(self, path: str, jobset: str) -> list[dict[str, Any]]:
        return self.cluster.list_items(path, label_selector=f"{JOBSET_NAME}={jobset}")

    def pods(self, jobset: str) -> list[dict[str, Any]]:
        return self.items(f"/api/v1/namespaces/{self.ns}/pods", jobset)

    def jobs(self, jobset: str) -> list[dict[str, Any]]:
        return self.items(f"/apis/batch/v1/namespaces/{self.ns}/jobs", jobset)

    def warnings(self, name: str) -> list[dict[str, Any]]:
        """Warning Events about TrainJob `name`."""
        return [
            e
            for e in self.cluster.list_items(f"/api/v1/namespaces/{self.ns}/events")
            if e["involvedObject"].get("kind") == "TrainJob"
            and e["involvedObject"].get("name") == name
            and e.get("type") == "Warning"
        ]

    # ------------------------------------------------------------------ waiting
    def wait_trainjob(
        self, name: str, predicate: Predicate, what: str, timeout: float = 90
    ) -> dict[str, Any]:
        """`FullCluster.wait_for` on the TrainJob (which scales `timeout`)."""
        return self.cluster.wait_for(
            f"{TRAINER_API}/namespaces/{self.ns}/trainjobs/{name}",
            predicate,
            timeout=timeout,
            what=f"TrainJob {self.ns}/{name}: {what}",
        )

    def wait_jobset(
        self, name: str, predicate: Predicate, what: str, timeout: float = 60
    ) -> dict[str, Any]:
        """`FullCluster.wait_for` on the JobSet (which scales `timeout`)."""
        return self.cluster.wait_for(
            f"{JOBSETS.format(ns=self.ns)}/{name}",
            predicate,
            timeout=timeout,
            what=f"JobSet {self.ns}/{name}: {what}",
        )

    def wait_finished(self, name: str, timeout: float = 90) -> list[dict[str, str]]:
        """The TrainJob's conditions once Complete or Failed, as (type, status, reason,
        message) dicts (lastTransitionTime left out, as Trainer's e2e compares them)."""
        body = self.wait_trainjob(name, finished, "Complete or Failed", timeout)
        return conditions(body)


def conditions(obj: Mapping[str, Any]) -> list[dict[str, str]]:
    keys = ("type", "status", "reason", "message")
    return [
        {k: c.get(k, "") for k in keys} for c in (obj.get("status") or {}).get("conditions") or ()
    ]


def condition(kind: str, status: str, reason_and_message: tuple[str, str]) -> dict[str, str]:
    reason, message = reason_and_message
    return {"type": kind, "status": status, "reason": reason, "message": message}


def first_failed(reason_and_message: tuple[str, str], job: str) -> tuple[str, str]:
    """A failure's reason and message as upstream v0.12 words them: naming the first Job that
    failed."""
    reason, message = reason_and_message
    return reason, f"{message} (first failed job: {job})"


def finished(trainjob: Mapping[str, Any]) -> bool:
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in (trainjob.get("status") or {}).get("conditions") or ()
    )


def managers(obj: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (m["manager"], m["operation"], m.get("subresource", ""))
        for m in obj["metadata"].get("managedFields") or ()
    }


@pytest.fixture
def env(trainer_cluster: TrainerCluster) -> Iterator[Namespace]:
    name = trainer_cluster.cluster.create_namespace(f"trainer-{uuid.uuid4().hex[:8]}")
    try:
        yield Namespace(trainer_cluster, name)
    finally:
        trainer_cluster.cluster.delete_namespace(name)


def test_torch_trainjob_completes_with_the_jobsets_completed_condition(env: Namespace) -> None:
    env.trainjob("torch", "torch-distributed")
    assert env.wait_finished("torch") == [condition("Complete", "True", COMPLETED)]
    js = env.get_jobset("torch")
    assert js is not None
    assert js["status"]["terminalState"] == "Completed"
    (owner,) = js["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainJob", "torch", True)
    # Trainer applies the spec; every write of ours is under upstream's manager name.
    assert managers(js) == {
        (TRAINER_FIELD_MANAGER, "Apply", ""),
        (JOBSET_FIELD_MANAGER, "Update", "status"),
    }
    for job in env.jobs("torch"):
        assert {m for m, _, _ in managers(job)} == {JOBSET_FIELD_MANAGER, "kube-controller-manager"}


def test_mpi_trainjob_completes_reading_status_in_upstreams_order_and_owning_atomic_structs(
    env: Namespace,
) -> None:
    env.trainjob("mpi", "mpi-distributed")
    assert env.wait_finished("mpi") == [condition("Complete", "True", COMPLETED)]
    js = env.get_jobset("mpi")
    assert js is not None
    # Spec order is [launcher, node]; upstream stores the status name-descending.
    assert [r["name"] for r in js["spec"]["replicatedJobs"]] == ["launcher", "node"]
    assert [r["name"] for r in js["status"]["replicatedJobsStatus"]] == ["node", "launcher"]
    # volumes[].configMap is atomic in upstream's CRD and ours: Trainer's apply owns it whole.
    (applied,) = [
        m["fieldsV1"] for m in js["metadata"]["managedFields"] if m["manager"] == "trainer"
    ]
    launcher = applied["f:spec"]["f:replicatedJobs"]['k:{"name":"launcher"}']
    volumes = launcher["f:template"]["f:spec"]["f:template"]["f:spec"]["f:volumes"]
    assert volumes['k:{"name":"mpi-hostfile"}']["f:configMap"] == {}


def test_multi_node_trainjob_with_gpus_runs_a_pod_per_node_with_its_gpus_then_completes(
    env: Namespace,
) -> None:
    resources = {"limits": {GPU: "2"}, "requests": {GPU: "2"}}
    env.trainjob(
        "gpus", "torch-distributed", trainer={"numNodes": 2, "resourcesPerNode": resources}
    )
    assert env.wait_finished("gpus") == [condition("Complete", "True", COMPLETED)]
    (job,) = env.jobs("gpus")
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (2, 2)
    pods = env.pods("gpus")
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"][GPU] == "2"
        env_vars = {e["name"]: e.get("value") for e in container.get("env") or ()}
        assert env_vars["PET_NNODES"] == "2"
        assert env_vars["PET_NPROC_PER_NODE"] == "auto"  # torchrun counts the GPUs itself
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["spec"]["nodeName"]


def test_a_failed_pod_fails_the_trainjob_with_the_jobsets_reason_and_message(
    env: Namespace,
) -> None:
    runtime = env.runtime_from_torch(
        "failing",
        pod_annotations={FAIL_EXIT_CODE_ANNOTATION: "3", RUN_DURATION_ANNOTATION: "500ms"},
        job_spec={"backoffLimit": 0},
    )
    env.trainjob("fails", runtime, kind="TrainingRuntime")
    assert env.wait_finished("fails") == [
        condition("Failed", "True", first_failed(FAILED_JOBS, "fails-node-0"))
    ]
    js = env.get_jobset("fails")
    assert js is not None
    assert (js["status"]["terminalState"], js["status"]["restarts"]) == ("Failed", 0)


def test_restarts_up_to_max_restarts_then_the_trainjob_fails_with_reached_max_restarts(
    env: Namespace,
) -> None:
    runtime = env.runtime_from_torch(
        "restarting",
        pod_annotations={FAIL_EXIT_CODE_ANNOTATION: "3", RUN_DURATION_ANNOTATION: "500ms"},
        job_spec={"backoffLimit": 0},
        jobset_spec={"failurePolicy": {"maxRestarts": 2}},
    )
    env.trainjob("restarts", runtime, kind="TrainingRuntime")
    assert env.wait_finished("restarts") == [
        condition("Failed", "True", first_failed(MAX_RESTARTS, "restarts-node-0"))
    ]
    js = env.get_jobset("restarts")
    assert js is not None
    assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (2, 2)

    # The last attempt's Job is kept, failed; the restarts deleted the earlier attempts' Jobs
    # (their deletion may still be under way when the TrainJob fails).
    def jobs() -> set[tuple[str, str]]:
        return {
            (j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"], j["metadata"]["name"])
            for j in env.jobs("restarts")
        }

    env.cluster.wait_for(
        f"/apis/batch/v1/namespaces/{env.ns}/jobs",
        lambda _: jobs() == {("2", "restarts-node-0")},
        what="only the last attempt's Job left",
        timeout=30,
    )


def test_a_suspended_trainjob_suspends_its_jobset_and_completes_once_resumed(
    env: Namespace,
) -> None:
    env.trainjob("paused", "torch-distributed", suspend=True)
    env.wait_trainjob(
        "paused",
        lambda tj: conditions(tj) == [condition("Suspended", "True", SUSPENDED)],
        "Suspended",
    )
    js = env.wait_jobset(
        "paused",
        lambda j: any(
            c["type"] == "Suspended" and c["status"] == "True"
            for c in (j.get("status") or {}).get("conditions") or ()
        ),
        "suspended by our controller",
    )
    assert js["spec"]["suspend"] is True
    assert all(job["spec"]["suspend"] for job in env.jobs("paused"))
    assert env.pods("paused") == []

    env.patch_trainjob("paused", {"suspend": False})
    assert env.wait_finished("paused") == [
        condition("Suspended", "False", RESUMED),
        condition("Complete", "True", COMPLETED),
    ]


def test_a_jobset_update_refused_while_suspended_reaches_the_trainjob_and_an_allowed_one_runs(
    env: Namespace,
) -> None:
    """While a TrainJob is suspended Trainer re-applies its JobSet with the TrainJob's
    podSpecOverrides. A new volume changes the pod template beyond what a suspended JobSet may
    change: our webhook refuses the apply, Trainer reports the refusal as a Warning Event and
    the JobSet keeps its spec. A nodeSelector may change: it is applied, and once resumed the
    pods run where it says."""
    env.trainjob("edits", "torch-distributed", suspend=True)
    env.wait_jobset("edits", lambda j: j.get("spec", {}).get("suspend") is True, "suspended")
    volume = {"name": "scratch", "emptyDir": {}}
    env.patch_trainjob(
        "edits", {"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "volumes": [volume]}]}
    )
    env.cluster.wait_for(
        f"/api/v1/namespaces/{env.ns}/events",
        lambda _: any(e["reason"] == RECONCILE_FAILED for e in env.warnings("edits")),
        what=f"a {RECONCILE_FAILED} Event about TrainJob edits",
        timeout=60,
    )
    (event, *_) = [e for e in env.warnings("edits") if e["reason"] == RECONCILE_FAILED]
    message = event["message"]
    assert message.startswith(
        'TrainJob resources reconciliation failed: admission webhook "vjobset.kb.io" denied '
        'the request: JobSet.jobset.x-k8s.io "edits" is invalid: spec.replicatedJobs: '
        "Invalid value: "
    ), message
    assert message.endswith(": field is immutable"), message
    js = env.get_jobset("edits")
    assert js is not None
    pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "volumes" not in pod_spec
    assert conditions(env.get_trainjob("edits")) == [condition("Suspended", "True", SUSPENDED)]

    rack = {RACK_LABEL: "rack-2"}
    env.patch_trainjob(
        "edits", {"podSpecOverrides": [{"targetJobs": [{"name": "node"}], "nodeSelector": rack}]}
    )
    env.wait_jobset(
        "edits",
        lambda j: (
            j["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].get(
                "nodeSelector"
            )
            == rack
        ),
        "the nodeSelector applied while suspended",
    )
    env.patch_trainjob("edits", {"suspend": False})
    assert env.wait_finished("edits")[-1] == condition("Complete", "True", COMPLETED)
    nodes = {p["spec"]["nodeName"] for p in env.pods("edits")}
    assert nodes, "no pods"
    assert all(n.startswith("kwok-r2-") for n in nodes), nodes


def test_deleting_a_trainjob_collects_its_jobset_jobs_service_and_pods(env: Namespace) -> None:
    runtime = env.runtime_from_torch("forever", pod_annotations={RUN_FOREVER_ANNOTATION: "true"})
    env.trainjob("doomed", runtime, kind="TrainingRuntime", trainer={"numNodes": 2})
    env.cluster.wait_for(
        f"/api/v1/namespaces/{env.ns}/pods",
        lambda _: sum(p["status"].get("phase") == "Running" for p in env.pods("doomed")) == 2,
        what="two running pods",
        timeout=60,
    )
    service = f"/api/v1/namespaces/{env.ns}/services/doomed"
    assert env.cluster.request("GET", service)[0] == 200

    status, reply = env.cluster.request(
        "DELETE", f"{TRAINER_API}/namespaces/{env.ns}/trainjobs/doomed"
    )
    assert status == 200, reply
    env.wait_jobset("doomed", lambda j: not j, "collected with its TrainJob")
    env.cluster.wait_for(service, lambda s: not s, what="the Service collected", timeout=60)
    env.cluster.wait_for(
        f"/api/v1/namespaces/{env.ns}/pods",
        lambda _: not env.jobs("doomed") and not env.pods("doomed"),
        what="Jobs and pods collected",
        timeout=60,
    )
