"""The soak's workloads: a seeded mix of JobSet shapes, each with the outcome its policies promise.

Why each workload carries its expectation: the soak's invariants are checked from outside, so
every JobSet must say, before it is created, where its policies will take it (Completed or
Failed, after how many restarts, deleted after finishing or kept). Pods end by kwok stages
(kwok_stages.py): a template annotation makes every pod fail, and the driver fails one running pod
of an attempt by annotating it (`Workload.inject`), so the number of restarts is known.

Shapes (all within upstream v0.12.0, so one seed drives both controllers):
- all / any: success policies All and Any over two replicatedJobs;
- max-restarts: every pod fails, Recreate with maxRestarts 1: Failed (ReachedMaxRestarts) after 1
  restart;
- fail-rule: a FailJobSet rule on BackoffLimitExceeded: Failed at once, no restart;
- restart-once / blocking: one pod of attempt 0 failed by the driver, Recreate and
  BlockingRecreate: Completed after 1 restart;
- ignore-max: a RestartJobSetAndIgnoreMaxRestarts rule with maxRestarts 0, one injected failure:
  Completed after 1 restart;
- in-order (startupPolicy InOrder), depends-on (dependsOn Ready), coordinator;
- exclusive: exclusive placement per rack, on the racks of the exclusive pool only;
- queued-low / queued-high: through Kueue's two ClusterQueues at two priorities (preemption
  suspends and resumes them);
- ttl: deleted 5 s after finishing (its Jobs with it);
- claims: a volumeClaimPolicies template (a PersistentVolume of the cluster's pool binds it),
  deleted after finishing with its claim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api.constants import EXCLUSIVE_KEY
from jobset_controller_dev.envtest.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from jobset_controller_dev.envtest.kwok_stages import (
    FAIL_EXIT_CODE_ANNOTATION,
    RUN_DURATION_ANNOTATION,
)
from jobset_controller_dev.envtest.manifests import container, jobset_manifest, replicated_job
from jobset_controller_dev.envtest.nodes import RACK_LABEL

POOL_LABEL: Final = "soak.jobset.test/pool"
GENERAL_POOL: Final = "general"
EXCLUSIVE_POOL: Final = "exclusive"
SHAPE_LABEL: Final = "soak.jobset.test/shape"
LOW_QUEUE: Final = "soak-low"
HIGH_QUEUE: Final = "soak-high"
LOW_PRIORITY: Final = "soak-low"
HIGH_PRIORITY: Final = "soak-high"
TTL_SECONDS: Final = 5

COMPLETED: Final = "Completed"
FAILED: Final = "Failed"

# shape -> weight in the mix (the burst's tiny JobSets are not drawn: `burst_workload`).
WEIGHTS: Final[dict[str, int]] = {
    "all": 3,
    "any": 2,
    "max-restarts": 1,
    "fail-rule": 1,
    "restart-once": 2,
    "blocking": 1,
    "ignore-max": 1,
    "in-order": 1,
    "depends-on": 1,
    "coordinator": 1,
    "exclusive": 1,
    "queued-low": 1,
    "queued-high": 1,
    "ttl": 1,
    "claims": 1,
}


@dataclass(frozen=True)
class Expectation:
    """Where the JobSet's policies take it: its terminal condition, `status.restarts` then,
    and whether it is deleted after finishing (ttlSecondsAfterFinished)."""

    terminal: str
    restarts: int = 0
    deleted_after: int | None = None
    queued: bool = False


@dataclass(frozen=True)
class Workload:
    name: str
    shape: str
    manifest: dict[str, Any]
    expect: Expectation
    # Attempts (restart-attempt values) in which the driver fails one running pod.
    inject: frozenset[int] = frozenset()


def _rjob(
    name: str,
    *,
    replicas: int = 1,
    pods: int = 1,
    run: str,
    fails: bool = False,
    cpu: str = "10m",
    pool: str = GENERAL_POOL,
) -> dict[str, Any]:
    """Indexed, backoffLimit 0; pods that run `run` (a Go duration) on `pool`'s nodes and then
    succeed, or fail (`fails`)."""
    annotations = {RUN_DURATION_ANNOTATION: run}
    if fails:
        annotations[FAIL_EXIT_CODE_ANNOTATION] = "1"
    resources = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    return replicated_job(
        name,
        replicas,
        pods=pods,
        backoff_limit=0,
        annotations=annotations,
        containers=[container(image="registry.example/soak:1", resources=resources)],
        pod_spec={"terminationGracePeriodSeconds": 1, "nodeSelector": {POOL_LABEL: pool}},
        job_spec={"completionMode": "Indexed"},
    )


def _jobset(name: str, shape: str, rjobs: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return jobset_manifest(name, replicated_jobs=rjobs, labels={SHAPE_LABEL: shape}, **spec)


def build(name: str, shape: str, rng: random.Random) -> Workload:
    """The workload of `shape` named `name`; `rng` picks its durations."""
    run = f"{rng.randint(2, 6)}s"
    long_run = f"{rng.randint(10, 15)}s"  # long enough for the driver to fail a running pod
    two = [_rjob("driver", run=run), _rjob("workers", replicas=2, pods=2, run=run)]
    if shape == "all":
        return Workload(
            name,
            shape,
            _jobset(name, shape, two, successPolicy={"operator": "All"}),
            Expectation(COMPLETED),
        )
    if shape == "any":
        manifest = _jobset(
            name,
            shape,
            two,
            successPolicy={"operator": "Any", "targetReplicatedJobs": ["workers"]},
        )
        return Workload(name, shape, manifest, Expectation(COMPLETED))
    if shape == "max-restarts":
        rjobs = [_rjob("workers", replicas=2, run=run, fails=True)]
        manifest = _jobset(name, shape, rjobs, failurePolicy={"maxRestarts": 1})
        return Workload(name, shape, manifest, Expectation(FAILED, restarts=1))
    if shape == "fail-rule":
        rule = {
            "name": "giveUp",
            "action": "FailJobSet",
            "onJobFailureReasons": ["BackoffLimitExceeded"],
        }
        rjobs = [_rjob("workers", replicas=2, run=run, fails=True)]
        manifest = _jobset(name, shape, rjobs, failurePolicy={"maxRestarts": 3, "rules": [rule]})
        return Workload(name, shape, manifest, Expectation(FAILED))
    if shape in ("restart-once", "blocking"):
        strategy = "Recreate" if shape == "restart-once" else "BlockingRecreate"
        rjobs = [_rjob("workers", replicas=2, pods=2, run=long_run)]
        policy = {"maxRestarts": 3, "restartStrategy": strategy}
        manifest = _jobset(name, shape, rjobs, failurePolicy=policy)
        return Workload(name, shape, manifest, Expectation(COMPLETED, restarts=1), frozenset({0}))
    if shape == "ignore-max":
        rule = {"name": "always", "action": "RestartJobSetAndIgnoreMaxRestarts"}
        rjobs = [_rjob("workers", replicas=2, run=long_run)]
        manifest = _jobset(name, shape, rjobs, failurePolicy={"maxRestarts": 0, "rules": [rule]})
        return Workload(name, shape, manifest, Expectation(COMPLETED, restarts=1), frozenset({0}))
    if shape == "in-order":
        manifest = _jobset(name, shape, two, startupPolicy={"startupPolicyOrder": "InOrder"})
        return Workload(name, shape, manifest, Expectation(COMPLETED))
    if shape == "depends-on":
        rjobs = [_rjob("driver", run=long_run), _rjob("workers", replicas=2, run=run)]
        rjobs[1]["dependsOn"] = [{"name": "driver", "status": "Ready"}]
        return Workload(name, shape, _jobset(name, shape, rjobs), Expectation(COMPLETED))
    if shape == "coordinator":
        manifest = _jobset(
            name, shape, two, coordinator={"replicatedJob": "driver", "jobIndex": 0, "podIndex": 0}
        )
        return Workload(name, shape, manifest, Expectation(COMPLETED))
    if shape == "exclusive":
        rjobs = [_rjob("workers", replicas=2, pods=2, run=run, pool=EXCLUSIVE_POOL)]
        manifest = _jobset(name, shape, rjobs)
        manifest["metadata"]["annotations"] = {EXCLUSIVE_KEY: RACK_LABEL}
        return Workload(name, shape, manifest, Expectation(COMPLETED))
    if shape in ("queued-low", "queued-high"):
        high = shape == "queued-high"
        rjobs = [_rjob("workers", replicas=2, pods=2, run=f"{rng.randint(6, 10)}s", cpu="1")]
        manifest = _jobset(name, shape, rjobs)
        manifest["metadata"]["labels"].update(
            {
                QUEUE_NAME_LABEL: HIGH_QUEUE if high else LOW_QUEUE,
                PRIORITY_CLASS_LABEL: HIGH_PRIORITY if high else LOW_PRIORITY,
            }
        )
        return Workload(name, shape, manifest, Expectation(COMPLETED, queued=True))
    if shape == "ttl":
        manifest = _jobset(name, shape, two, ttlSecondsAfterFinished=TTL_SECONDS)
        return Workload(name, shape, manifest, Expectation(COMPLETED, deleted_after=TTL_SECONDS))
    if shape == "claims":
        rjobs = [_rjob("workers", run=run)]
        container = rjobs[0]["template"]["spec"]["template"]["spec"]["containers"][0]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        claim = {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
            },
        }
        manifest = _jobset(
            name,
            shape,
            rjobs,
            ttlSecondsAfterFinished=TTL_SECONDS,
            volumeClaimPolicies=[{"templates": [claim]}],
        )
        return Workload(name, shape, manifest, Expectation(COMPLETED, deleted_after=TTL_SECONDS))
    if shape == "burst":
        rjobs = [_rjob("one", run="1s")]
        return Workload(name, shape, _jobset(name, shape, rjobs), Expectation(COMPLETED))
    raise ValueError(f"unknown shape {shape!r}")


def draw(rng: random.Random, index: int) -> Workload:
    """The `index`-th workload of the seeded mix (`rng` is the run's, seeded once)."""
    shapes = list(WEIGHTS)
    shape = rng.choices(shapes, weights=[WEIGHTS[s] for s in shapes])[0]
    return build(f"soak-{index:05d}-{shape}", shape, rng)


def burst_workload(burst: int, index: int) -> Workload:
    """The `index`-th of burst number `burst`'s tiny JobSets (one Job of one 1-s pod)."""
    return build(f"burst-{burst}-{index:03d}", "burst", random.Random(0))
