"""CREATE validation (docs/behaviour.md#validation-create and the CRD's create-time CEL rules):
every message, its field path, its kind and its position in upstream's order; valid JobSets
produce no error."""

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jobset_controller.api import FeatureGates, FieldError, JobSet, validate_create

Path = tuple[str | int, ...]
Patch = Mapping[Path, Any]
Expected = list[tuple[str, str, str]]  # (field path, error type, message substring)

RJ0: Path = ("spec", "replicatedJobs", 0)
RJ1: Path = ("spec", "replicatedJobs", 1)
JOB0: Path = (*RJ0, "template", "spec")
JOB1: Path = (*RJ1, "template", "spec")
POD0: Path = (*JOB0, "template", "spec")
POD1: Path = (*JOB1, "template", "spec")

ALL_GATES = FeatureGates(in_place_restart=True, restart_job=True, elastic_job_set=True)
IN_PLACE = FeatureGates(in_place_restart=True)
RESTART_JOB = FeatureGates(restart_job=True)

DNS1035 = "a DNS-1035 label must consist of lower case alphanumeric characters"
DNS1123 = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
JOB_TOO_LONG = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
POD_TOO_LONG = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)
NOT_INDEXED = (
    "job for coordinator pod must be indexed completion mode, and completions number must be set"
)


def containers_mounting(*names: str, init: bool = False) -> Patch:
    """Patch giving the leader's pod one container (or init container) mounting ``names``."""
    container = {
        "name": "main",
        "image": "busybox",
        "volumeMounts": [{"name": name, "mountPath": f"/{name}"} for name in names],
    }
    return {(*POD0, "initContainers" if init else "containers"): [container]}


def claims(*names: str, retention: str | None = None) -> Patch:
    """Patch adding one volumeClaimPolicy per name, each with one template of that name."""
    policies: list[dict[str, Any]] = []
    for name in names:
        policy: dict[str, Any] = {
            "templates": [{"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
        }
        if retention is not None:
            policy["retentionPolicy"] = {"whenDeleted": retention}
        policies.append(policy)
    return {("spec", "volumeClaimPolicies"): policies}


def in_place_ready(*indices: int) -> Patch:
    """Patch making the replicatedJobs at ``indices`` fit for in-place restart."""
    patch: dict[Path, Any] = {("spec", "failurePolicy"): {"restartStrategy": "InPlaceRestart"}}
    for index in indices:
        job: Path = ("spec", "replicatedJobs", index, "template", "spec")
        patch[(*job, "backoffLimit")] = 2147483647
        patch[(*job, "podReplacementPolicy")] = "Failed"
    return patch


def rules(*rule_list: dict[str, Any]) -> Patch:
    return {("spec", "failurePolicy"): {"rules": list(rule_list)}}


INVALID_CASES = [
    # --- CRD CEL rules (the API server rejects these before the webhook runs) ---
    pytest.param(
        {
            ("spec", "startupPolicy"): {"startupPolicyOrder": "InOrder"},
            (*RJ1, "dependsOn"): [{"name": "leader", "status": "Ready"}],
        },
        None,
        [("spec", "Invalid", "StartupPolicy and DependsOn APIs are mutually exclusive")],
        id="InOrder startup policy with dependsOn",
    ),
    pytest.param(
        {
            **claims("data"),
            **containers_mounting("data"),
            ("spec", "volumeClaimPolicies", 0, "templates", 0, "metadata", "namespace"): "ml",
        },
        None,
        [
            (
                "spec.volumeClaimPolicies[0]",
                "Invalid",
                "namespace cannot be set for VolumeClaimPolicies templates",
            )
        ],
        id="PVC template sets a namespace",
    ),
    # --- 1. in-place restart gate ---
    pytest.param(
        {("spec", "failurePolicy"): {"restartStrategy": "InPlaceRestart"}},
        None,
        [
            (
                "spec.failurePolicy.restartStrategy",
                "Forbidden",
                "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate "
                "is disabled",
            )
        ],
        id="InPlaceRestart strategy while the gate is off",
    ),
    # --- 2. first replicatedJob dependsOn ---
    pytest.param(
        {(*RJ0, "dependsOn"): [{"name": "workers", "status": "Ready"}]},
        None,
        [
            (
                "spec.replicatedJobs[0].dependsOn",
                "Forbidden",
                "DependsOn can't be set for the first ReplicatedJob",
            ),
            (
                "spec.replicatedJobs[0].dependsOn[0].name",
                "Invalid",
                "replicatedJob: leader cannot depend on replicatedJob: workers",
            ),
        ],
        id="first replicatedJob depends on a later one",
    ),
    pytest.param(
        {(*RJ0, "dependsOn"): []},
        None,
        [("spec.replicatedJobs[0].dependsOn", "Forbidden", "DependsOn can't be set")],
        id="first replicatedJob with an explicit empty dependsOn",
    ),
    # --- 3. subdomain ---
    pytest.param(
        {("spec", "network", "subdomain"): "Bad_Sub"},
        None,
        [
            ("spec.network.subdomain", "Invalid", DNS1123),
            ("spec.network.subdomain", "Invalid", DNS1035),
        ],
        id="subdomain neither DNS-1123 subdomain nor DNS-1035 label",
    ),
    pytest.param(
        {("spec", "network", "subdomain"): "a" * 64},
        None,
        [
            (
                "spec.network.subdomain",
                "Invalid",
                ".spec.network.subdomain is too long, must be less than 63 characters",
            )
        ],
        id="subdomain longer than 63",
    ),
    pytest.param(
        {("spec", "network", "subdomain"): "1abc"},
        None,
        [("spec.network.subdomain", "Invalid", DNS1035)],
        id="subdomain starting with a digit is no DNS-1035 label",
    ),
    pytest.param(
        {("spec", "network", "subdomain"): "a.b"},
        None,
        [("spec.network.subdomain", "Invalid", DNS1035)],
        id="subdomain with a dot is no DNS-1035 label",
    ),
    # --- 4. managedBy ---
    pytest.param(
        {("spec", "managedBy"): "acme"},
        None,
        [("spec.managedBy", "Invalid", 'must be a domain-prefixed path (such as "acme.io/foo")')],
        id="managedBy without a slash",
    ),
    pytest.param(
        {("spec", "managedBy"): "Acme.io/ctl"},
        None,
        [("spec.managedBy", "Invalid", DNS1123)],
        id="managedBy host not a subdomain",
    ),
    pytest.param(
        {("spec", "managedBy"): "acme.io/a b"},
        None,
        [("spec.managedBy", "Invalid", "must be a valid path (regex used for validation is")],
        id="managedBy path with a space",
    ),
    pytest.param(
        {("spec", "managedBy"): ""},
        None,
        [("spec.managedBy", "Required", "")],
        id="managedBy empty",
    ),
    pytest.param(
        {("spec", "managedBy"): "acme.io/" + "a" * 56},
        None,
        [("spec.managedBy", "TooLong", "may not be more than 63 bytes")],
        id="managedBy of 64 characters",
    ),
    # --- 5. each replicatedJob ---
    pytest.param(
        {(*JOB1, "parallelism"): 2**30, (*JOB1, "completions"): 2**30},
        None,
        [
            (
                "spec.replicatedJobs[1].replicas",
                "Invalid",
                "the product of replicas and parallelism must not exceed 2147483647 for "
                "replicatedJob 'workers'",
            )
        ],
        id="replicas times parallelism overflows int32",
    ),
    pytest.param(
        {(*RJ0, "groupName"): "Bad"},
        None,
        [("spec.replicatedJobs[0].groupName", "Invalid", DNS1035)],
        id="groupName not a DNS-1035 label",
    ),
    pytest.param(
        {(*RJ0, "groupName"): "g" * 64},
        None,
        [
            (
                "spec.replicatedJobs[0].groupName",
                "Invalid",
                ".spec.replicatedJob[].groupName is too long, must be less than 63 characters",
            )
        ],
        id="groupName longer than 63",
    ),
    pytest.param(
        {("metadata", "name"): "Trainer"},
        None,
        [
            ("spec.replicatedJobs[0].name", "Invalid", DNS1035),
            ("spec.replicatedJobs[0].name", "Invalid", DNS1035),
            ("spec.replicatedJobs[1].name", "Invalid", DNS1035),
            ("spec.replicatedJobs[1].name", "Invalid", DNS1035),
        ],
        id="upper-case JobSet name fails the job and pod name checks",
    ),
    pytest.param(
        {("metadata", "name"): "t" * 54},
        None,
        [
            ("spec.replicatedJobs[0].name", "Invalid", POD_TOO_LONG),
            ("spec.replicatedJobs[1].name", "Invalid", JOB_TOO_LONG),
            ("spec.replicatedJobs[1].name", "Invalid", POD_TOO_LONG),
        ],
        id="long JobSet name gives job and pod names over 63",
    ),
    pytest.param(
        {(*RJ1, "dependsOn"): [{"name": "missing", "status": "Complete"}]},
        None,
        [
            (
                "spec.replicatedJobs[1].dependsOn[0].name",
                "Invalid",
                "replicatedJob: workers cannot depend on replicatedJob: missing",
            )
        ],
        id="dependsOn an unknown replicatedJob",
    ),
    pytest.param(
        {
            (*RJ1, "dependsOn"): [
                {"name": "leader", "status": "Ready"},
                {"name": "later", "status": "Ready"},
            ],
            ("spec", "replicatedJobs", 2): {"name": "later", "template": {}},
        },
        None,
        [
            (
                "spec.replicatedJobs[1].dependsOn[1].name",
                "Invalid",
                "replicatedJob: workers cannot depend on replicatedJob: later",
            )
        ],
        id="dependsOn a later replicatedJob, second item checked too",
    ),
    pytest.param(
        {("spec", "failurePolicy"): {"restartStrategy": "InPlaceRestart"}},
        IN_PLACE,
        [
            (
                "spec.replicatedJobs[0].template.spec.backoffLimit",
                "Invalid",
                "replicatedJob leader: must be set to 2147483647 (MaxInt32) when in-place "
                "restart is enabled",
            ),
            (
                "spec.replicatedJobs[0].template.spec.podReplacementPolicy",
                "Invalid",
                "replicatedJob leader: must be set to Failed when in-place restart is enabled",
            ),
            (
                "spec.replicatedJobs[1].template.spec.backoffLimit",
                "Invalid",
                "replicatedJob workers",
            ),
            (
                "spec.replicatedJobs[1].template.spec.podReplacementPolicy",
                "Invalid",
                "replicatedJob workers",
            ),
        ],
        id="in-place restart without backoffLimit and podReplacementPolicy",
    ),
    pytest.param(
        {**in_place_ready(0, 1), (*JOB1, "parallelism"): 2},
        IN_PLACE,
        [
            (
                "spec.replicatedJobs[1].template.spec.completions",
                "Invalid",
                "replicatedJob workers: completions and parallelism must be set and equal to "
                "each other when in-place restart is enabled",
            )
        ],
        id="in-place restart with completions unequal to parallelism",
    ),
    pytest.param(
        {**in_place_ready(0, 1), (*JOB0, "completions"): ...},
        IN_PLACE,
        [
            (
                "spec.replicatedJobs[0].template.spec.completions",
                "Invalid",
                "completions and parallelism must be set and equal",
            )
        ],
        id="in-place restart without completions",
    ),
    # --- 6. success policy ---
    pytest.param(
        {("spec", "successPolicy"): {"operator": "Any", "targetReplicatedJobs": ["workers", "x"]}},
        None,
        [
            (
                "spec.successPolicy.targetReplicatedJobs[1]",
                "Invalid",
                "invalid replicatedJob name 'x' does not appear in .spec.ReplicatedJobs",
            )
        ],
        id="success policy targets an unknown replicatedJob",
    ),
    # --- 7. failure policy ---
    pytest.param(
        rules(
            {"action": "FailJobSet"},
            {"action": "RestartJob", "onJobFailureReasons": ["Evicted"]},
        ),
        None,
        [
            (
                "spec.failurePolicy.rules[1].action",
                "Forbidden",
                "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not "
                "allowed when RestartJob feature gate is disabled",
            )
        ],
        id="RestartJob action while the gate is off stops the failure policy checks",
    ),
    pytest.param(
        {**rules({"action": "RestartJobAndIgnoreMaxRestarts"}), (*RJ1, "replicas"): 1025},
        RESTART_JOB,
        [
            (
                "spec.replicatedJobs[1].replicas",
                "Invalid",
                "JobSet cannot have a failure policy rule with RestartJob or "
                "RestartJobAndIgnoreMaxRestarts action and a replicated job with replicas > 1024",
            )
        ],
        id="RestartJob action with more than 1024 replicas",
    ),
    pytest.param(
        rules({"name": "r" * 129, "action": "FailJobSet"}),
        None,
        [
            (
                "spec.failurePolicy.rules[0].name",
                "Invalid",
                "invalid failure policy rule name of length 129, the rule name must be at least "
                "1 characters long and at most 128 characters long",
            )
        ],
        id="rule name longer than 128",
    ),
    pytest.param(
        rules({"name": "1bad", "action": "FailJobSet"}),
        None,
        [
            (
                "spec.failurePolicy.rules[0].name",
                "Invalid",
                "invalid failure policy rule name '1bad', a failure policy rule name must start "
                "with an alphabetic character, optionally followed by a string of alphanumeric "
                "characters or '_,:', and must end with an alphanumeric character or '_'",
            )
        ],
        id="rule name starting with a digit",
    ),
    pytest.param(
        rules({"name": "bad-name", "action": "FailJobSet"}),
        None,
        [
            (
                "spec.failurePolicy.rules[0].name",
                "Invalid",
                "invalid failure policy rule name 'bad-name'",
            )
        ],
        id="rule name with a hyphen",
    ),
    pytest.param(
        rules({"name": "ends:", "action": "FailJobSet"}),
        None,
        [
            (
                "spec.failurePolicy.rules[0].name",
                "Invalid",
                "invalid failure policy rule name 'ends:'",
            )
        ],
        id="rule name ending with a colon",
    ),
    pytest.param(
        rules({"action": "FailJobSet", "targetReplicatedJobs": ["leader", "ghost"]}),
        None,
        [
            (
                "spec.failurePolicy.rules[0].targetReplicatedJobs[1]",
                "Invalid",
                "invalid replicatedJob name 'ghost' in failure policy does not appear in "
                ".spec.ReplicatedJobs",
            )
        ],
        id="rule targets an unknown replicatedJob",
    ),
    pytest.param(
        rules({"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy", "Evicted"]}),
        None,
        [
            (
                "spec.failurePolicy.rules[0].onJobFailureReasons[1]",
                "Invalid",
                "invalid job failure reason 'Evicted' in failure policy is not a recognized job "
                "failure reason",
            )
        ],
        id="rule names an unknown job failure reason",
    ),
    pytest.param(
        rules(
            {"name": "a", "action": "FailJobSet"},
            {"name": "b", "action": "FailJobSet"},
            {"name": "a", "action": "RestartJobSet"},
        ),
        None,
        [
            (
                "spec.failurePolicy.rules[2].name",
                "Duplicate",
                "rule names are not unique, rules with indices [0 2] all have the same name 'a'",
            )
        ],
        id="two rules share a name",
    ),
    pytest.param(
        rules({"action": "FailJobSet"}, {"name": "failurePolicyRule0", "action": "FailJobSet"}),
        None,
        [
            (
                "spec.failurePolicy.rules[1].name",
                "Duplicate",
                "rules with indices [0 1] all have the same name 'failurePolicyRule0'",
            )
        ],
        id="a rule named like another rule's default name",
    ),
    # --- 8. coordinator ---
    pytest.param(
        {("spec", "coordinator"): {"replicatedJob": "ghost"}},
        None,
        [
            (
                "spec.coordinator.replicatedJob",
                "Invalid",
                "coordinator replicatedJob ghost does not exist",
            )
        ],
        id="coordinator replicatedJob does not exist",
    ),
    pytest.param(
        {("spec", "coordinator"): {"replicatedJob": "workers", "jobIndex": 2, "podIndex": 9}},
        None,
        [
            (
                "spec.coordinator.jobIndex",
                "Invalid",
                "coordinator job index 2 is invalid for replicatedJob workers",
            )
        ],
        id="coordinator jobIndex out of range, only the first error",
    ),
    pytest.param(
        {("spec", "coordinator"): {"replicatedJob": "workers", "jobIndex": -1}},
        None,
        [("spec.coordinator.jobIndex", "Invalid", "coordinator job index -1 is invalid")],
        id="coordinator jobIndex negative",
    ),
    pytest.param(
        {
            ("spec", "coordinator"): {"replicatedJob": "workers"},
            (*JOB1, "completionMode"): "NonIndexed",
        },
        None,
        [("spec.replicatedJobs[1].template.spec.completionMode", "Invalid", NOT_INDEXED)],
        id="coordinator in a NonIndexed replicatedJob",
    ),
    pytest.param(
        {("spec", "coordinator"): {"replicatedJob": "workers"}, (*JOB1, "completions"): ...},
        None,
        [("spec.replicatedJobs[1].template.spec.completions", "Invalid", NOT_INDEXED)],
        id="coordinator in a replicatedJob without completions",
    ),
    pytest.param(
        {("spec", "coordinator"): {"replicatedJob": "workers", "jobIndex": 1, "podIndex": 4}},
        None,
        [
            (
                "spec.coordinator.podIndex",
                "Invalid",
                "coordinator pod index 4 is invalid for replicatedJob workers job index 1",
            )
        ],
        id="coordinator podIndex out of range",
    ),
    pytest.param(
        {
            ("spec", "coordinator"): {"replicatedJob": "leader"},
            ("spec", "network", "subdomain"): "s" * 60,
        },
        None,
        [
            (
                "spec.coordinator",
                "Invalid",
                'spec will lead to invalid label value "trainer-leader-0-0.' + "s" * 60 + '" '
                'for coordinator label "jobset.sigs.k8s.io/coordinator" (long JobSet / '
                "ReplicatedJob / SubDomain name?): must be no more than 63 characters",
            )
        ],
        id="coordinator endpoint too long for a label value",
    ),
    pytest.param(
        {
            ("spec", "coordinator"): {"replicatedJob": "ghost"},
            ("spec", "network", "subdomain"): "s" * 60,
        },
        None,
        [
            ("spec.coordinator.replicatedJob", "Invalid", "does not exist"),
            ("spec.coordinator", "Invalid", "spec will lead to invalid label value"),
        ],
        id="coordinator range error and label error are both reported",
    ),
    # --- 9. volumeClaimPolicies ---
    pytest.param(
        {**claims("data", "data"), **containers_mounting("data")},
        None,
        [
            (
                "spec.volumeClaimPolicies[1].templates[0].metadata.name",
                "Invalid",
                "names must be unique for VolumeClaimPolicies template",
            )
        ],
        id="two PVC templates share a name",
    ),
    pytest.param(
        {**claims("Data"), **containers_mounting("Data")},
        None,
        [("spec.volumeClaimPolicies[0].templates[0].metadata.name", "Invalid", DNS1123)],
        id="PVC template name not a DNS-1123 subdomain",
    ),
    pytest.param(
        {**claims("d" * 56), **containers_mounting("d" * 56)},
        None,
        [
            (
                "spec.volumeClaimPolicies[0].templates[0].metadata.name",
                "Invalid",
                "VolumeClaimPolicies template name is too long",
            )
        ],
        id="PVC name over 63 characters",
    ),
    pytest.param(
        {
            **claims("data"),
            **containers_mounting("data"),
            (*POD1, "volumes"): [{"name": "scratch", "emptyDir": {}}, {"name": "data"}],
        },
        None,
        [
            (
                "spec.replicatedJobs[1].template.spec.template.spec.volumes[1].name",
                "Invalid",
                "volume name conflicts with VolumeClaimPolicy template name: data",
            )
        ],
        id="pod template already has a volume of the template's name",
    ),
    pytest.param(
        claims("data"),
        None,
        [
            (
                "spec.volumeClaimPolicies[0].templates[0].metadata.name",
                "Invalid",
                "replicatedJob containers don't have a matching volumeMount: data from "
                "VolumeClaimPolicies",
            )
        ],
        id="no container mounts the PVC template",
    ),
]


def _assert_errors(errors: list[FieldError], expected: Expected) -> None:
    got = [(error.field, error.type, error.message) for error in errors]
    assert len(got) == len(expected), got
    for (field, type_, message), (want_field, want_type, want_message) in zip(
        got, expected, strict=True
    ):
        assert (field, type_) == (want_field, want_type), got
        assert want_message in message, got


@pytest.mark.parametrize(("patch", "features", "expected"), INVALID_CASES)
def test_invalid_jobset_is_rejected_with_upstream_message(
    admitted: Callable[[Patch], JobSet],
    patch: Patch,
    features: FeatureGates | None,
    expected: Expected,
) -> None:
    errors = validate_create(admitted(patch), features=features or FeatureGates())
    _assert_errors(errors, expected)


@pytest.mark.parametrize(("patch", "features", "expected"), INVALID_CASES)
def test_non_defaulted_jobset_gives_the_same_errors(
    patched: Callable[[Patch], dict[str, Any]],
    admitted: Callable[[Patch], JobSet],
    patch: Patch,
    features: FeatureGates | None,
    expected: Expected,
) -> None:
    gates = features or FeatureGates()
    raw = JobSet.model_validate(patched(patch))
    assert validate_create(raw, features=gates) == validate_create(admitted(patch), features=gates)


VALID_CASES = [
    pytest.param({}, None, id="the base JobSet"),
    pytest.param({}, ALL_GATES, id="the base JobSet with every gate on"),
    pytest.param({(*RJ0, "replicas"): 0}, None, id="zero replicas"),
    pytest.param(
        {(*RJ1, "dependsOn"): [{"name": "leader", "status": "Ready"}]}, None, id="dependsOn earlier"
    ),
    pytest.param(
        {(*RJ1, "dependsOn"): [{"name": "workers", "status": "Ready"}]},
        None,
        id="self dependency passes (upstream quirk)",
    ),
    pytest.param(
        {
            ("spec", "startupPolicy"): {"startupPolicyOrder": "AnyOrder"},
            (*RJ1, "dependsOn"): [{"name": "leader", "status": "Complete"}],
        },
        None,
        id="AnyOrder startup policy with dependsOn",
    ),
    pytest.param({("spec", "network", "subdomain"): "net-1"}, None, id="custom subdomain"),
    pytest.param(
        {("spec", "managedBy"): "jobset.sigs.k8s.io/jobset-controller"},
        None,
        id="managedBy the built-in controller",
    ),
    pytest.param(
        {(*JOB0, "parallelism"): 2147483647, (*JOB0, "completions"): ...},
        None,
        id="replicas times parallelism exactly MaxInt32",
    ),
    pytest.param({(*RJ0, "groupName"): "g" * 63}, None, id="groupName of 63"),
    pytest.param(in_place_ready(0, 1), IN_PLACE, id="in-place restart fully configured"),
    pytest.param(
        {("spec", "successPolicy"): {"operator": "All", "targetReplicatedJobs": ["leader"]}},
        None,
        id="success policy targeting a known replicatedJob",
    ),
    pytest.param(
        rules(
            {"name": "r" * 128, "action": "FailJobSet", "onJobFailureReasons": ["FailedIndexes"]},
            {"name": "a_b,c:D", "action": "RestartJobSet", "targetReplicatedJobs": ["workers"]},
            {"action": "RestartJobSetAndIgnoreMaxRestarts"},
        ),
        None,
        id="failure policy rules at the name limits",
    ),
    pytest.param(
        {**rules({"action": "RestartJob"}), (*RJ1, "replicas"): 1024},
        RESTART_JOB,
        id="RestartJob with 1024 replicas and the gate on",
    ),
    pytest.param(
        {("spec", "coordinator"): {"replicatedJob": "workers", "jobIndex": 1, "podIndex": 3}},
        None,
        id="coordinator at the last pod",
    ),
    pytest.param(
        {**claims("data"), **containers_mounting("data", init=True)},
        None,
        id="PVC template mounted by an init container",
    ),
    pytest.param(
        {**claims("data", retention="Retain"), **containers_mounting("data")},
        None,
        id="retained PVC template",
    ),
]


@pytest.mark.parametrize(("patch", "features"), VALID_CASES)
def test_valid_jobset_has_no_errors(
    admitted: Callable[[Patch], JobSet], patch: Patch, features: FeatureGates | None
) -> None:
    assert validate_create(admitted(patch), features=features or FeatureGates()) == []


def _minimal(
    *,
    name: str | None = None,
    generate_name: str | None = None,
    completions: int | None = None,
    extra_spec: dict[str, Any] | None = None,
    mounts: tuple[str, ...] = (),
) -> JobSet:
    """One replicatedJob ``w`` with one Job; pods are counted only when ``completions`` is set."""
    metadata: dict[str, Any] = {"namespace": "ml"}
    if name is not None:
        metadata["name"] = name
    if generate_name is not None:
        metadata["generateName"] = generate_name
    container = {"name": "c", "volumeMounts": [{"name": m, "mountPath": f"/{m}"} for m in mounts]}
    job_spec: dict[str, Any] = {"template": {"spec": {"containers": [container]}}}
    if completions is not None:
        job_spec["completions"] = completions
    spec = {"replicatedJobs": [{"name": "w", "template": {"spec": job_spec}}], **(extra_spec or {})}
    return JobSet.model_validate({"metadata": metadata, "spec": spec})


def _coordinator(subdomain_length: int) -> dict[str, Any]:
    return {"coordinator": {"replicatedJob": "w"}, "network": {"subdomain": "s" * subdomain_length}}


def _claim() -> dict[str, Any]:
    return {"volumeClaimPolicies": [{"templates": [{"metadata": {"name": "data"}}]}]}


# Lengths: job "<js>-w-0" = js + 4; pod "<js>-w-0-0-abcde" = js + 12;
# coordinator "<js>-w-0-0.<subdomain>" = js + 7 + subdomain; PVC "data-<js>" = js + 5.
NAME_LENGTH_CASES = [
    pytest.param(_minimal(name="a" * 59), [], id="job name of exactly 63"),
    pytest.param(_minimal(name="a" * 60), [JOB_TOO_LONG], id="job name of 64"),
    pytest.param(_minimal(name="a" * 51, completions=1), [], id="pod name of exactly 63"),
    pytest.param(_minimal(name="a" * 52, completions=1), [POD_TOO_LONG], id="pod name of 64"),
    pytest.param(_minimal(generate_name="a" * 54), [], id="generateName job name of 63"),
    pytest.param(_minimal(generate_name="a" * 55), [JOB_TOO_LONG], id="generateName job 64"),
    pytest.param(
        _minimal(generate_name="a" * 100),
        [JOB_TOO_LONG],
        id="generateName prefix cut to 58 still too long",
    ),
    pytest.param(
        _minimal(generate_name="a" * 46, completions=1), [], id="generateName pod name of 63"
    ),
    pytest.param(
        _minimal(generate_name="a" * 47, completions=1),
        [POD_TOO_LONG],
        id="generateName pod name of 64",
    ),
    pytest.param(
        _minimal(name="a" * 20, completions=1, extra_spec=_coordinator(36)),
        [],
        id="coordinator label value of exactly 63",
    ),
    pytest.param(
        _minimal(name="a" * 20, completions=1, extra_spec=_coordinator(37)),
        ["spec will lead to invalid label value"],
        id="coordinator label value of 64",
    ),
    pytest.param(
        _minimal(generate_name="a" * 16, completions=1, extra_spec=_coordinator(37)),
        ["spec will lead to invalid label value"],
        id="coordinator label value of 64 with generateName",
    ),
    pytest.param(
        _minimal(name="a" * 58, extra_spec=_claim(), mounts=("data",)),
        [],
        id="PVC name of exactly 63",
    ),
    pytest.param(
        _minimal(name="a" * 59, extra_spec=_claim(), mounts=("data",)),
        ["VolumeClaimPolicies template name is too long"],
        id="PVC name of 64",
    ),
    pytest.param(
        _minimal(generate_name="a" * 54, extra_spec=_claim(), mounts=("data",)),
        ["VolumeClaimPolicies template name is too long"],
        id="PVC name of 64 with generateName",
    ),
]


@pytest.mark.parametrize(("js", "messages"), NAME_LENGTH_CASES)
def test_generated_name_lengths(js: JobSet, messages: list[str]) -> None:
    errors = validate_create(js)
    assert len(errors) == len(messages), errors
    for error, message in zip(errors, messages, strict=True):
        assert message in error.message


def test_a_pod_name_error_shows_the_longest_job_name_as_its_value_as_upstream() -> None:
    """Upstream's webhook reports the pod name check with the Job name as the invalid value
    (found by the differential tests, tests/differential)."""
    errors = validate_create(_minimal(name="a" * 52, completions=1))
    assert [(error.message, error.bad_value) for error in errors] == [
        (POD_TOO_LONG, "a" * 52 + "-w-0")
    ]
    assert 'Invalid value: "' + "a" * 52 + '-w-0": ' + POD_TOO_LONG in str(errors[0])


def test_no_name_at_all_fails_the_job_name_check() -> None:
    errors = validate_create(_minimal())
    assert [(error.field, error.bad_value) for error in errors] == [
        ("spec.replicatedJobs[0].name", "-w-0")
    ]


def _existing(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"data-trainer": {"metadata": {"name": "data-trainer"}, "spec": spec}}


SAME_SPEC = {"accessModes": ["ReadWriteOnce"]}


@pytest.mark.parametrize(
    ("retention", "existing", "expected"),
    [
        pytest.param("Retain", None, [], id="existing PVCs unknown: checks skipped"),
        pytest.param(None, {}, [], id="no PVC of that name exists"),
        pytest.param("Retain", _existing(SAME_SPEC), [], id="existing PVC matches and is retained"),
        pytest.param(
            "Retain",
            _existing({"accessModes": ["ReadWriteMany"]}),
            [
                (
                    "spec.volumeClaimPolicies[0].templates[0].spec",
                    "Invalid",
                    "spec does not match existing PVC data-trainer in namespace ml",
                )
            ],
            id="existing PVC spec differs",
        ),
        pytest.param(
            None,
            _existing(SAME_SPEC),
            [
                (
                    "spec.volumeClaimPolicies[0].retentionPolicy.whenDeleted",
                    "Invalid",
                    "retentionPolicy must be retain when PVC exists",
                )
            ],
            id="existing PVC but the policy deletes it",
        ),
    ],
)
def test_existing_pvc_checks(
    admitted: Callable[[Patch], JobSet],
    retention: str | None,
    existing: dict[str, dict[str, Any]] | None,
    expected: Expected,
) -> None:
    js = admitted({**claims("data", retention=retention), **containers_mounting("data")})
    _assert_errors(validate_create(js, existing_pvcs=existing), expected)


@pytest.mark.parametrize(
    ("error", "text"),
    [
        pytest.param(
            FieldError("spec.replicatedJobs[0].groupName", "Invalid", "bad", "Bad"),
            'spec.replicatedJobs[0].groupName: Invalid value: "Bad": bad',
            id="invalid string value is quoted",
        ),
        pytest.param(
            FieldError("spec.coordinator.jobIndex", "Invalid", "bad", 2),
            "spec.coordinator.jobIndex: Invalid value: 2: bad",
            id="invalid number is bare",
        ),
        pytest.param(
            FieldError("spec.x", "Invalid", "bad", None),
            'spec.x: Invalid value: "null": bad',
            id="missing value prints as null",
        ),
        pytest.param(
            FieldError("spec.x", "Invalid", "bad", True),
            "spec.x: Invalid value: true: bad",
            id="boolean",
        ),
        pytest.param(
            FieldError("spec.x", "Invalid", "bad", ["a", 1]),
            'spec.x: Invalid value: ["a",1]: bad',
            id="list as compact JSON",
        ),
        pytest.param(
            FieldError("spec.x", "Forbidden", "not allowed", "v"),
            "spec.x: Forbidden: not allowed",
            id="forbidden omits the value",
        ),
        pytest.param(
            FieldError("spec.managedBy", "TooLong", "may not be more than 63 bytes", "v"),
            "spec.managedBy: Too long: may not be more than 63 bytes",
            id="too long omits the value",
        ),
        pytest.param(
            FieldError("spec.managedBy", "Required", ""),
            "spec.managedBy: Required value",
            id="required without detail",
        ),
        pytest.param(
            FieldError("spec.a[1].name", "Duplicate", "dup", "a"),
            'spec.a[1].name: Duplicate value: "a": dup',
            id="duplicate",
        ),
        pytest.param(
            FieldError("", "InternalError", "boom"), "Internal error: boom", id="no field path"
        ),
    ],
)
def test_field_error_renders_like_apimachinery(error: FieldError, text: str) -> None:
    assert str(error) == text


def test_validation_does_not_mutate_the_jobset(admitted: Callable[[Patch], JobSet]) -> None:
    js = admitted({("metadata", "name"): "Trainer", **claims("data")})
    before = js.to_dict()
    validate_create(js, existing_pvcs={})
    assert js.to_dict() == before
