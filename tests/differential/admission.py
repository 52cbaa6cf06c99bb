"""Invalid JobSets (and updates) sent to both API servers: the admission answers are compared.

Each case is a create of a JobSet that breaks one rule, or an update of a JobSet created valid
(and suspended) just before. The answer compared is the API server's Status: HTTP code, reason,
message, and the causes (field, reason, message) sorted; a create or update that is admitted is
compared by the object it stored (spec only, scrubbed like the scenarios'). The webhooks and the
CRD answering are each side's own (upstream's CRD and webhook on one, ours on the other).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.differential.compare import scrub
from tests.differential.scenarios import FOREVER, js, rj
from tests.differential.sides import Side

NAMESPACE = "admission"
JOBSETS = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"

Edit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Case:
    """`create`: the JobSet sent. `update`: None for a create case; else applied to the stored
    copy of `create` (made valid and suspended), which is then sent as a PUT."""

    id: str
    create: dict[str, Any]
    update: Edit | None = None


def base(name: str, **spec: Any) -> dict[str, Any]:
    return js(name, rj("leader"), rj("workers", replicas=2, pods=2, annotations=FOREVER), **spec)


def rule(**fields: Any) -> dict[str, Any]:
    return {"failurePolicy": {"maxRestarts": 1, "rules": [{"name": "r", "action": "FailJobSet",
                                                            **fields}]}}  # fmt: skip


def with_rjob(name: str, edit: Callable[[dict[str, Any]], None], **spec: Any) -> dict[str, Any]:
    body = base(name, **spec)
    edit(body)
    return body


def _set(path: list[Any], value: Any) -> Edit:
    def edit(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


POD = ["spec", "replicatedJobs", 1, "template", "spec", "template", "spec"]


def cases() -> list[Case]:
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    # fmt: off
    return [
        Case("success-target-unknown",
             base("a1", successPolicy={"operator": "All", "targetReplicatedJobs": ["nope"]})),
        Case("rule-target-unknown", base("a2", **rule(targetReplicatedJobs=["nope"]))),
        Case("rule-name-invalid", base("a3", failurePolicy={"rules": [
            {"name": "bad name!", "action": "FailJobSet"}]})),
        Case("rule-names-duplicate", base("a4", failurePolicy={"rules": [
            {"name": "r", "action": "FailJobSet"}, {"name": "r", "action": "RestartJobSet"}]})),
        Case("rule-reason-unknown", base("a5", **rule(onJobFailureReasons=["Nope"]))),
        Case("rule-pattern-invalid", base("a6", **rule(onJobFailureMessagePatterns=["(unclosed"]))),
        Case("rule-restartjob-gate-off", base("a7", failurePolicy={"rules": [
            {"name": "r", "action": "RestartJob"}]})),
        Case("rule-restartjob-ignore-gate-off", base("a8", failurePolicy={"rules": [
            {"name": "r", "action": "RestartJobAndIgnoreMaxRestarts"}]})),
        Case("in-place-restart-gate-off",
             base("a9", failurePolicy={"restartStrategy": "InPlaceRestart"})),
        Case("coordinator-unknown",
             base("a10", coordinator={"replicatedJob": "nope", "jobIndex": 0, "podIndex": 0})),
        Case("coordinator-job-index",
             base("a11", coordinator={"replicatedJob": "workers", "jobIndex": 2, "podIndex": 0})),
        Case("coordinator-pod-index",
             base("a12", coordinator={"replicatedJob": "workers", "jobIndex": 1, "podIndex": 2})),
        Case("depends-on-first", with_rjob("a13", _set(["spec", "replicatedJobs", 0, "dependsOn"],
                                                       [{"name": "workers", "status": "Ready"}]))),
        Case("depends-on-unknown", with_rjob("a14", _set(["spec", "replicatedJobs", 1, "dependsOn"],
                                                         [{"name": "nope", "status": "Ready"}]))),
        Case("name-too-long", base("a" * 60)),
        Case("subdomain-invalid", base("a16", network={"subdomain": "Bad_Subdomain"})),
        Case("managed-by-too-long", base("a17", managedBy="example.com/" + "x" * 60)),
        Case("replicated-job-name-invalid",
             with_rjob("a18", _set(["spec", "replicatedJobs", 1, "name"], "Bad_Name"))),
        Case("replicas-negative",
             with_rjob("a19", _set(["spec", "replicatedJobs", 1, "replicas"], -1))),
        Case("claim-not-mounted",
             base("a20", volumeClaimPolicies=[{"templates": [claim]}])),
        Case("ttl-negative", base("a21", ttlSecondsAfterFinished=-1)),
        # KEP-1186, ahead of upstream: v0.12.0's CRD has no activeDeadlineSeconds (pruned there)
        Case("active-deadline-zero", base("a22", activeDeadlineSeconds=0)),
        Case("active-deadline-kept", base("a23", activeDeadlineSeconds=30)),
        # --- updates of a valid JobSet, created suspended ------------------------------------
        Case("update-replicas", base("u1", suspend=True),
             _set(["spec", "replicatedJobs", 1, "replicas"], 3)),
        Case("update-managed-by", base("u2", suspend=True), _set(["spec", "managedBy"], "x.io/y")),
        Case("update-image-suspended", base("u3", suspend=True),
             _set([*POD, "containers", 0, "image"], "busybox:2")),
        Case("update-node-selector-suspended", base("u4", suspend=True),
             _set([*POD, "nodeSelector"], {"topology.jobset.test/rack": "rack-1"})),
        Case("update-success-policy", base("u5", suspend=True),
             _set(["spec", "successPolicy"], {"operator": "Any"})),
    ]
    # fmt: on


def answer(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """The comparable part of an API answer."""
    if status in (200, 201):
        return {"code": status, "spec": scrub(body.get("spec"))}
    details = body.get("details") or {}
    causes = sorted(
        (
            {k: c.get(k) for k in ("field", "reason", "message")}
            for c in details.get("causes") or ()
        ),
        key=lambda c: (str(c["field"]), str(c["message"])),
    )
    scrubbed: dict[str, Any] = scrub(
        {
            "code": status,
            "reason": body.get("reason"),
            "message": body.get("message"),
            "causes": causes,
        }
    )
    return scrubbed


def run_case(side: Side, case: Case) -> dict[str, Any]:
    cluster = side.cluster
    if case.update is None:
        return answer(*cluster.request("POST", JOBSETS, case.create))
    status, stored = cluster.request("POST", JOBSETS, case.create)
    assert status == 201, stored
    name = case.create["metadata"]["name"]
    for _ in range(10):  # the controller writes status meanwhile: retry a conflict
        status, stored = cluster.request("GET", f"{JOBSETS}/{name}")
        changed = copy.deepcopy(stored)
        case.update(changed)
        status, reply = cluster.request("PUT", f"{JOBSETS}/{name}", changed)
        if status != 409:
            return answer(status, reply)
    raise AssertionError(f"{case.id}: update conflicted 10 times")
