"""`jobset-controller validate` against the real thing: kube-apiserver plus our admission webhooks.

A deterministic corpus (no randomness, so a failure names the same document on every run) of
JobSets: valid ones of several shapes, and each of those with one mutation applied (bad names,
negative/huge/fractional/string replicas, bad enum values, bad or RE2-unsupported patterns,
duplicate names, too many list items, explicit nulls, missing spec, oversized annotations, bad
labels, wrong types, ...). Every document is judged twice:

* offline, by ``check_manifest`` (what ``validate`` prints), with the default feature gates;
* online, by a ``dryRun=All`` create in this test's namespace, with our mutating and validating
  webhooks registered for that namespace (same default gates), exactly as ``kubectl create
  --dry-run=server`` would be judged. The request uses the API server's default field validation
  (unknown fields pruned with a warning).

Accept/reject must agree for every document, except those in ``DELIBERATE_DIFFERENCES`` (each with
its reason, all documented differences of ``api/manifest.py``). The corpus size and the agreement
are printed.
"""

from __future__ import annotations

import copy
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from jobset_controller.api import FeatureGates
from jobset_controller.api.manifest import check_manifest
from jobset_controller.runtime.client import ApiError, KubeClient
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.webhooks import (
    jobset_webhooks_served,
)

FEATURES: Final = FeatureGates()

# Mutation name -> why validate's verdict deliberately differs from the API server's.
_TEMPLATES: Final = (
    "documented in api/manifest.py: inside the embedded Job and Pod templates only the fields "
    "the models type are checked; the CRD embeds the full Job/Pod schema (enums, required "
    "fields), which validate does not replicate"
)
DELIBERATE_DIFFERENCES: Final[dict[str, str]] = {
    "completion-mode-bad": _TEMPLATES,
    "containers-missing": _TEMPLATES,
    "containers-null": _TEMPLATES,
    "container-name-missing": _TEMPLATES,
    "restart-policy-bad": _TEMPLATES,
}
# Bases that get every mutation; the others are checked as they are.
MUTATED_BASES: Final = ("minimal", "rich", "depends")


# ------------------------------------------------------------------------------------ corpus
def pod_spec() -> dict[str, Any]:
    return {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}


def rjob(name: str, replicas: int = 1, **job_spec: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {**job_spec, "template": {"spec": pod_spec()}}},
    }


def jobset(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", **metadata},
        "spec": spec,
    }


def bases() -> dict[str, dict[str, Any]]:
    """Valid JobSets of different shapes; every mutation below is applied to each."""
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    rich = jobset(
        {
            "replicatedJobs": [
                rjob("leader", 1, parallelism=1, completions=1, backoffLimit=0),
                rjob("workers", 3, parallelism=2, completions=2, completionMode="Indexed"),
            ],
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["workers"]},
            "failurePolicy": {
                "maxRestarts": 3,
                "restartStrategy": "Recreate",
                "rules": [
                    {
                        "name": "byMessage",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["BackoffLimitExceeded"],
                        "onJobFailureMessagePatterns": [r"^Job has reached .* limit$"],
                        "targetReplicatedJobs": ["workers"],
                    }
                ],
            },
            "network": {"enableDNSHostnames": True, "subdomain": "net"},
            "ttlSecondsAfterFinished": 60,
        },
        labels={"team": "ml", "example.com/tier": "gold"},
        annotations={"note": "rich"},
    )
    with_claims = jobset(
        {"replicatedJobs": [rjob("workers", 2)], "volumeClaimPolicies": [{"templates": [claim]}]}
    )
    mount = [{"name": "data", "mountPath": "/data"}]
    containers = with_claims["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    containers["containers"][0]["volumeMounts"] = mount
    depends = jobset(
        {
            "replicatedJobs": [
                rjob("init", 1),
                {**rjob("main", 2), "dependsOn": [{"name": "init", "status": "Complete"}]},
            ]
        }
    )
    return {
        "minimal": jobset({"replicatedJobs": [rjob("workers")]}),
        "rich": rich,
        "claims": with_claims,
        "depends": depends,
        "in-order": jobset(
            {
                "replicatedJobs": [rjob("a", 2), rjob("b", 2)],
                "startupPolicy": {"startupPolicyOrder": "InOrder"},
                "successPolicy": {"operator": "Any"},
                "suspend": True,
            }
        ),
        "coordinator": jobset(
            {
                "replicatedJobs": [rjob("workers", 2, completionMode="Indexed", completions=2)],
                "coordinator": {"replicatedJob": "workers", "jobIndex": 1, "podIndex": 1},
                "managedBy": "example.com/queue",
            }
        ),
        "huge": jobset({"replicatedJobs": [rjob("workers", 20_000_000, parallelism=1)]}),
        "generate-name": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"generateName": "batch-"},
            "spec": {"replicatedJobs": [rjob("workers")]},
        },
    }


Path_ = tuple[str | int, ...]
RJ0: Final[Path_] = ("spec", "replicatedJobs", 0)
JOB0: Final[Path_] = (*RJ0, "template", "spec")
POD0: Final[Path_] = (*JOB0, "template", "spec")
RULE0: Final[Path_] = ("spec", "failurePolicy", "rules", 0)
DELETE: Final = object()


def put(document: dict[str, Any], path: Path_, value: object) -> None:
    """Set (or with ``DELETE`` remove) ``path``, creating missing mappings on the way."""
    node: Any = document
    for part in path[:-1]:
        if isinstance(part, str) and part not in node:
            node[part] = {}
        node = node[part]
    if value is DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def sets(*changes: tuple[Path_, object]) -> Callable[[dict[str, Any]], None]:
    def apply(document: dict[str, Any]) -> None:
        for path, value in changes:
            put(document, path, value)

    return apply


def with_rule(**fields: Any) -> Callable[[dict[str, Any]], None]:
    rule = {"name": "r", "action": "FailJobSet", **fields}
    return sets((("spec", "failurePolicy"), {"maxRestarts": 1, "rules": [rule]}))


def pattern(text: str) -> Callable[[dict[str, Any]], None]:
    return with_rule(onJobFailureMessagePatterns=[text])


def duplicate_first_rjob(document: dict[str, Any]) -> None:
    rjobs = document["spec"]["replicatedJobs"]
    rjobs.append(copy.deepcopy(rjobs[0]))


def claim_policies(count: int) -> Callable[[dict[str, Any]], None]:
    def apply(document: dict[str, Any]) -> None:
        claim = {"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
        policies: list[dict[str, Any]] = []
        for index in range(count):
            template = copy.deepcopy(claim)
            template["metadata"] = {"name": f"c{index}"}
            policies.append({"templates": [template]})
        document["spec"]["volumeClaimPolicies"] = policies

    return apply


def mutations() -> dict[str, Callable[[dict[str, Any]], None]]:
    """One change each; applied to every base (so ``name`` can be any valid base's field)."""
    kib = 1024
    return {
        # metadata
        "name-uppercase": sets((("metadata", "name"), "Bad_Name")),
        "name-leading-dash": sets((("metadata", "name"), "-js")),
        "name-40-chars": sets((("metadata", "name"), "a" * 40)),
        "name-64-chars": sets((("metadata", "name"), "a" * 64)),
        "name-254-chars": sets((("metadata", "name"), "a" * 254)),
        "name-number": sets((("metadata", "name"), 5)),
        "name-and-generate-name-missing": sets(
            (("metadata", "name"), DELETE), (("metadata", "generateName"), DELETE)
        ),
        "generate-name-bad": sets(
            (("metadata", "name"), DELETE), (("metadata", "generateName"), "Bad_")
        ),
        "metadata-null": sets((("metadata",), None)),
        "metadata-number": sets((("metadata",), 5)),
        "metadata-list": sets((("metadata",), ["js"])),
        "labels-null": sets((("metadata", "labels"), None)),
        "label-value-null": sets((("metadata", "labels"), {"a": None})),
        "label-key-space": sets((("metadata", "labels"), {"bad key": "v"})),
        "label-key-long-prefix": sets((("metadata", "labels"), {"a" * 254 + "/k": "v"})),
        "label-value-64-chars": sets((("metadata", "labels"), {"k": "v" * 64})),
        "label-value-dash": sets((("metadata", "labels"), {"k": "-v"})),
        "label-value-number": sets((("metadata", "labels"), {"k": 1})),
        "labels-list": sets((("metadata", "labels"), ["k"])),
        "annotations-null": sets((("metadata", "annotations"), None)),
        "annotation-value-null": sets((("metadata", "annotations"), {"a": None})),
        "annotations-200-kib": sets((("metadata", "annotations"), {"big": "x" * 200 * kib})),
        "annotations-300-kib": sets((("metadata", "annotations"), {"big": "x" * 300 * kib})),
        "annotations-split-300-kib": sets(
            (("metadata", "annotations"), {f"k{i}": "x" * 100 * kib for i in range(3)})
        ),
        "annotation-key-bad": sets((("metadata", "annotations"), {"bad key!": "v"})),
        "namespace-matches": sets((("metadata", "namespace"), "{namespace}")),
        "generation-negative": sets((("metadata", "generation"), -1)),
        "finalizer-bad": sets((("metadata", "finalizers"), ["bad finalizer"])),
        "finalizer-qualified": sets((("metadata", "finalizers"), ["example.com/keep"])),
        # type meta
        "api-version-wrong": sets((("apiVersion",), "jobset.x-k8s.io/v1")),
        "kind-missing": sets((("kind",), DELETE)),
        "status-set": sets((("status",), {"restarts": 5, "bogus": True})),
        # spec shape
        "spec-missing": sets((("spec",), DELETE)),
        "spec-null": sets((("spec",), None)),
        "spec-empty": sets((("spec",), {})),
        "spec-string": sets((("spec",), "x")),
        "spec-list": sets((("spec",), [])),
        "replicated-jobs-null": sets((("spec", "replicatedJobs"), None)),
        "replicated-jobs-empty": sets((("spec", "replicatedJobs"), [])),
        "replicated-jobs-object": sets((("spec", "replicatedJobs"), {})),
        "replicated-job-null-item": sets((("spec", "replicatedJobs"), [None])),
        "replicated-job-duplicate-name": duplicate_first_rjob,
        "replicated-job-name-bad": sets(((*RJ0, "name"), "Bad_Name")),
        "replicated-job-name-missing": sets(((*RJ0, "name"), DELETE)),
        "replicated-job-template-null": sets(((*RJ0, "template"), None)),
        "unknown-spec-field": sets((("spec", "notAField"), 1)),
        "unknown-top-level-field": sets((("extra",), {"x": 1})),
        # numbers
        "replicas-negative": sets(((*RJ0, "replicas"), -1)),
        "replicas-zero": sets(((*RJ0, "replicas"), 0)),
        "replicas-null": sets(((*RJ0, "replicas"), None)),
        "replicas-int32-max": sets(((*RJ0, "replicas"), 2**31 - 1)),
        "replicas-int32-overflow": sets(((*RJ0, "replicas"), 2**31)),
        "replicas-int64-max": sets(((*RJ0, "replicas"), 2**63 - 1)),
        "replicas-string": sets(((*RJ0, "replicas"), "3")),
        "replicas-fraction": sets(((*RJ0, "replicas"), 1.5)),
        "replicas-whole-float": sets(((*RJ0, "replicas"), 2.0)),
        "replicas-float-1e20": sets(((*RJ0, "replicas"), 1e20)),
        "replicas-bool": sets(((*RJ0, "replicas"), True)),
        "replicas-times-parallelism-overflow": sets(
            ((*RJ0, "replicas"), 50_000), ((*JOB0, "parallelism"), 50_000)
        ),
        "parallelism-negative": sets(((*JOB0, "parallelism"), -1)),
        "completions-zero": sets(((*JOB0, "completions"), 0)),
        "backoff-limit-string": sets(((*JOB0, "backoffLimit"), "6")),
        "ttl-negative": sets((("spec", "ttlSecondsAfterFinished"), -1)),
        "ttl-string": sets((("spec", "ttlSecondsAfterFinished"), "10")),
        "active-deadline-zero": sets((("spec", "activeDeadlineSeconds"), 0)),
        "active-deadline-negative": sets((("spec", "activeDeadlineSeconds"), -1)),
        "active-deadline-one": sets((("spec", "activeDeadlineSeconds"), 1)),
        "active-deadline-int64-max": sets((("spec", "activeDeadlineSeconds"), 2**63 - 1)),
        "active-deadline-string": sets((("spec", "activeDeadlineSeconds"), "10")),
        "max-restarts-negative": sets((("spec", "failurePolicy", "maxRestarts"), -1)),
        # enums and booleans
        "success-operator-bad": sets((("spec", "successPolicy"), {"operator": "Some"})),
        "success-target-unknown": sets(
            (("spec", "successPolicy"), {"operator": "All", "targetReplicatedJobs": ["nope"]})
        ),
        "startup-order-bad": sets((("spec", "startupPolicy"), {"startupPolicyOrder": "Random"})),
        "restart-strategy-bad": sets((("spec", "failurePolicy", "restartStrategy"), "Never")),
        "restart-strategy-blocking": sets(
            (("spec", "failurePolicy", "restartStrategy"), "BlockingRecreate")
        ),
        "completion-mode-bad": sets(((*JOB0, "completionMode"), "Sometimes")),
        "suspend-string": sets((("spec", "suspend"), "yes")),
        "suspend-null": sets((("spec", "suspend"), None)),
        "dns-hostnames-string": sets((("spec", "network"), {"enableDNSHostnames": "true"})),
        "subdomain-bad": sets((("spec", "network"), {"subdomain": "Bad_Sub"})),
        "subdomain-64-chars": sets((("spec", "network"), {"subdomain": "s" * 64})),
        "depends-on-first": sets(((*RJ0, "dependsOn"), [{"name": "x", "status": "Complete"}])),
        "managed-by-long": sets((("spec", "managedBy"), "example.com/" + "m" * 60)),
        # failure policy rules
        "rule-action-bad": with_rule(action="Explode"),
        "rule-action-restart-job-gated": with_rule(action="RestartJob"),
        "rule-action-restart-jobset": with_rule(action="RestartJobSet"),
        "rule-action-ignore-max": with_rule(action="RestartJobSetAndIgnoreMaxRestarts"),
        "rule-reason-bad": with_rule(onJobFailureReasons=["Whatever"]),
        "rule-reason-good": with_rule(onJobFailureReasons=["DeadlineExceeded"]),
        "rule-name-bad": with_rule(name="1bad name"),
        "rule-name-missing": with_rule(name=None),
        "rule-target-unknown": with_rule(targetReplicatedJobs=["nope"]),
        "rules-duplicate-names": sets(
            (
                ("spec", "failurePolicy"),
                {"rules": [{"name": "r", "action": "FailJobSet"}] * 2},
            )
        ),
        "pattern-catastrophic-but-re2": pattern(r"^(\w+\s?)*\d$"),
        "pattern-lookahead": pattern("(?=x)"),
        "pattern-negative-lookahead": pattern("a(?!b)"),
        "pattern-lookbehind": pattern("(?<=a)b"),
        "pattern-backreference": pattern(r"(a)\1"),
        "pattern-unclosed-class": pattern("[a-"),
        "pattern-unclosed-group": pattern("(ab"),
        "pattern-repeat-1001": pattern("a{1001}"),
        "pattern-repeat-1000": pattern("a{1000}"),
        "pattern-possessive": pattern("a++"),
        "pattern-named-group-p": pattern("(?P<n>x)"),
        "pattern-unicode-class": pattern(r"\p{Greek}+"),
        "pattern-flags": pattern("(?i)job"),
        "pattern-empty": pattern(""),
        "pattern-null-item": with_rule(onJobFailureMessagePatterns=[None]),
        "pattern-number": with_rule(onJobFailureMessagePatterns=[5]),
        # volume claim policies
        "claims-50": claim_policies(50),
        "claims-51": claim_policies(51),
        "claims-retention-bad": sets(
            (("spec", "volumeClaimPolicies"), [{"retentionPolicy": {"whenDeleted": "Never"}}])
        ),
        # embedded Job and Pod templates
        "containers-missing": sets(((*POD0, "containers"), DELETE)),
        "container-name-missing": sets(((*POD0, "containers"), [{"image": "busybox"}])),
        "containers-null": sets(((*POD0, "containers"), None)),
        "restart-policy-bad": sets(((*POD0, "restartPolicy"), "Sometimes")),
        "pod-unknown-field": sets(((*POD0, "notAField"), True)),
    }


@dataclass(frozen=True)
class Case:
    label: str
    mutation: str
    document: dict[str, Any]


def corpus(namespace: str) -> Iterator[Case]:
    for base_name, base in bases().items():
        yield Case(f"{base_name}", "", base)
        if base_name not in MUTATED_BASES:
            continue
        for mutation_name, mutate in mutations().items():
            document = copy.deepcopy(base)
            mutate(document)
            metadata = document.get("metadata")
            if isinstance(metadata, dict) and metadata.get("namespace") == "{namespace}":
                metadata["namespace"] = namespace
            yield Case(f"{base_name}/{mutation_name}", mutation_name, document)


# ------------------------------------------------------------------------------- webhooks
@pytest.fixture
async def webhooks(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[None]:
    async with jobset_webhooks_served(
        control_plane, kube, namespace, tmp_path, features=FEATURES, validate_operations=["CREATE"]
    ):
        yield


# ----------------------------------------------------------------------------------- test
@dataclass(frozen=True)
class Verdicts:
    case: Case
    offline: tuple[str, ...]  # validate's errors; empty = accepted
    online: str | None  # the API server's refusal; None = accepted

    @property
    def agree(self) -> bool:
        return (not self.offline) == (self.online is None)


async def judge_online(kube: KubeClient, namespace: str, document: dict[str, Any]) -> str | None:
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    try:
        await kube.create(path, document, dryRun="All")
    except ApiError as error:
        return f"{error.status} {error.reason}: {error.message}"
    return None


@pytest.mark.usefixtures("webhooks")
async def test_validate_accepts_and_rejects_what_the_api_server_and_webhook_do(
    kube: KubeClient, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    results: list[Verdicts] = []
    for case in corpus(namespace):
        offline = check_manifest(copy.deepcopy(case.document), features=FEATURES)
        assert offline.is_jobset, case.label
        online = await judge_online(kube, namespace, case.document)
        results.append(Verdicts(case, tuple(str(e) for e in offline.errors), online))

    if os.environ.get("JOBSET_DIFFERENTIAL_REPORT"):  # every verdict, for a human to read
        Path(os.environ["JOBSET_DIFFERENTIAL_REPORT"]).write_text(  # noqa: ASYNC240
            "".join(
                f"{r.case.label}\t{'agree' if r.agree else 'DIFFER'}\t"
                f"validate={'; '.join(r.offline)[:400] or 'accepts'}\t"
                f"server={(r.online or 'accepts')[:400]}\n"
                for r in results
            )
        )
    disagreements = [r for r in results if not r.agree]
    unexplained = [r for r in disagreements if r.case.mutation not in DELIBERATE_DIFFERENCES]
    accepted = sum(1 for r in results if r.online is None)
    with capsys.disabled():
        print(
            f"\n  validate vs API server + webhook: {len(results)} documents "
            f"({accepted} accepted, {len(results) - accepted} refused by the server), "
            f"{len(results) - len(disagreements)} agree, {len(disagreements)} differ "
            f"({len(disagreements) - len(unexplained)} deliberate)"
        )
    report = "\n".join(
        f"- {r.case.label}: validate "
        + (f"rejects: {'; '.join(r.offline)[:300]}" if r.offline else "accepts")
        + f" | server {'rejects: ' + r.online[:300] if r.online else 'accepts'}"
        for r in unexplained
    )
    assert not unexplained, f"validate disagrees with the API server + webhook:\n{report}"
    stale = set(DELIBERATE_DIFFERENCES) - {r.case.mutation for r in disagreements}
    assert not stale, f"allow-listed differences that no longer differ: {sorted(stale)}"
