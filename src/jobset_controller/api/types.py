"""The JobSet v1alpha2 API as pydantic models: typed where we read, lossless everywhere.

Why lossless: the controller writes back objects it read, and a client newer than us may have set
fields we do not know. Dropping them would silently undo the user's intent. So every model keeps
unknown keys (``extra="allow"``), and ``to_dict()`` dumps only what was on the wire or set since
(``exclude_unset``), explicit nulls included. For any wire dict ``d``::

    JobSet.model_validate(d).to_dict() == d

Rules the models follow:

* Wire names are camelCase (``to_camel`` plus explicit aliases where that conversion is wrong,
  e.g. ``enableDNSHostnames``); Python attributes are snake_case and either name is accepted on
  input. (A snake_case key on the wire is therefore read as the field, not kept as unknown data.)
* Defaults of the contract (``replicas`` 1, ``groupName`` "default", ``restartStrategy`` Recreate,
  ...) are declared on the fields, so reading gives the right value; they appear in ``to_dict()``
  only once set. ``defaults.default_jobset`` materialises them the way admission does.
* Enum-typed fields are exactly those the CRD declares as enums; other values raise a pydantic
  ``ValidationError``. Strings the CRD leaves open (completionMode, terminalState...) stay ``str``.
  CRD bounds (``minimum: 0``, ``maxItems``) are enforced the same way.
* Fields the CRD requires are required here, except inside the embedded batch/v1 and core/v1
  templates, whose schema the API server checks: there typed fields are all optional.
* Lists and maps default to empty containers, so ``js.spec.replicated_jobs`` is ``[]`` when absent
  (the API server drops nulls from them, so a stored object never holds one). The exceptions are
  ``dependsOn``, where absent and empty differ for validation, and the pod-template fields Kueue
  rewrites (``nodeSelector``, ``tolerations``, ``schedulingGates``), which user manifests often
  leave null.

* Integers and booleans are strict: ``replicas: "3"`` or ``suspend: "yes"`` is an error, as it is
  for the API server's schema, instead of being converted (which would also break losslessness).

Mutating an unset default in place (``js.spec.replicated_jobs.append(...)`` on a JobSet without
replicatedJobs) does not mark it set, so the change is not dumped; assign the field instead.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from pydantic.alias_generators import to_camel

from jobset_controller.api.constants import (
    API_VERSION,
    DEFAULT_GROUP_NAME,
    KIND,
    ConditionStatus,
    DependsOnStatus,
    FailurePolicyAction,
    Operator,
    RestartStrategy,
    RetentionWhenDeleted,
    StartupPolicyOrder,
)


class WireModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields kept, lossless dump."""

    model_config = ConfigDict(
        extra="allow",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        validate_assignment=True,
        # Validators and serialisers are built on first use, not at import: a third of the
        # import of this package, which every start pays before /readyz while only the first
        # reconcile or admission needs them.
        defer_build=True,
    )

    def to_dict(self) -> dict[str, Any]:
        """Dump to a JSON-ready wire dict: aliases, only fields read or set, unknown fields kept."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# --- metadata -------------------------------------------------------------------------------


class ObjectMeta(WireModel):
    """metav1.ObjectMeta: the fields the controller reads; managedFields etc. kept as extra."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: StrictInt | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)
    finalizers: list[str] = Field(default_factory=list)


# --- the embedded batch/v1 Job template -------------------------------------------------------


class VolumeMount(WireModel):
    """core/v1 VolumeMount; matched by name against volumeClaimPolicies templates."""

    name: str = ""
    mount_path: str = ""


class Container(WireModel):
    """core/v1 Container: only the name and volume mounts are typed."""

    name: str = ""
    volume_mounts: list[VolumeMount] = Field(default_factory=list)


class Volume(WireModel):
    """core/v1 Volume: typed name, the volume source is kept as extra data."""

    name: str = ""


class Toleration(WireModel):
    """core/v1 Toleration, added by exclusive placement and merged on resume."""

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: StrictInt | None = None


class SchedulingGate(WireModel):
    """core/v1 PodSchedulingGate (Kueue adds and removes these while a JobSet is suspended)."""

    name: str = ""


class PodSpec(WireModel):
    """core/v1 PodSpec: the fields JobSet defaults, injects, merges or validates."""

    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    scheduling_gates: list[SchedulingGate] | None = None
    subdomain: str | None = None
    restart_policy: str | None = None
    priority: StrictInt | None = None
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)


class PodTemplateSpec(WireModel):
    """core/v1 PodTemplateSpec of a Job."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class JobSpec(WireModel):
    """batch/v1 JobSpec: the fields JobSet defaults, validates or overrides."""

    parallelism: StrictInt | None = None
    completions: StrictInt | None = None
    completion_mode: str | None = None
    backoff_limit: StrictInt | None = None
    pod_replacement_policy: str | None = None
    suspend: StrictBool | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class JobTemplateSpec(WireModel):
    """batch/v1 JobTemplateSpec: the template each child Job is built from."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSpec = Field(default_factory=JobSpec)


class PersistentVolumeClaim(WireModel):
    """core/v1 PersistentVolumeClaim used as a volumeClaimPolicies template.

    Only the metadata is typed; ``spec`` stays a plain dict because it is copied verbatim into the
    PVC and compared as a whole with an existing PVC's spec.
    """

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] = Field(default_factory=dict)


# --- JobSet spec ------------------------------------------------------------------------------


class DependsOn(WireModel):
    """A replicatedJob that must reach ``status`` before the dependent one starts."""

    name: str
    status: DependsOnStatus


class ReplicatedJob(WireModel):
    """A Job template stamped out ``replicas`` times as ``<jobset>-<name>-<index>``."""

    name: str
    group_name: str = DEFAULT_GROUP_NAME
    template: JobTemplateSpec
    replicas: StrictInt = Field(default=1, ge=0)
    depends_on: list[DependsOn] | None = Field(default=None, max_length=5)


class Network(WireModel):
    """DNS for the JobSet's pods through a headless Service named after the subdomain."""

    enable_dns_hostnames: StrictBool | None = Field(default=None, alias="enableDNSHostnames")
    subdomain: str = ""
    publish_not_ready_addresses: StrictBool | None = None


class SuccessPolicy(WireModel):
    """When the JobSet counts as succeeded; no targets means all replicatedJobs."""

    operator: Operator
    target_replicated_jobs: list[str] = Field(default_factory=list)


class FailurePolicyRule(WireModel):
    """One rule of the failure policy; the first rule matching a failed Job decides the action."""

    name: str = ""
    action: FailurePolicyAction
    on_job_failure_reasons: list[str] = Field(default_factory=list)
    on_job_failure_message_patterns: list[str] = Field(default_factory=list)
    target_replicated_jobs: list[str] = Field(default_factory=list)


class FailurePolicy(WireModel):
    """What to do when child Jobs fail; absent means any failed Job fails the JobSet."""

    max_restarts: StrictInt = 0
    restart_strategy: RestartStrategy = RestartStrategy.RECREATE
    rules: list[FailurePolicyRule] = Field(default_factory=list)


class StartupPolicy(WireModel):
    """Deprecated ordering of replicatedJob creation (superseded by dependsOn)."""

    startup_policy_order: StartupPolicyOrder


class Coordinator(WireModel):
    """The pod whose stable DNS name is published to every Job and Pod as the coordinator."""

    replicated_job: str
    job_index: StrictInt = 0
    pod_index: StrictInt = 0


class RetentionPolicy(WireModel):
    """Whether PVCs created from volumeClaimPolicies outlive the JobSet."""

    when_deleted: RetentionWhenDeleted = RetentionWhenDeleted.DELETE


class VolumeClaimPolicy(WireModel):
    """PVCs shared by the JobSet's pods, created as ``<template name>-<jobset name>``."""

    templates: list[PersistentVolumeClaim] = Field(default_factory=list, max_length=50)
    retention_policy: RetentionPolicy | None = None


class Choice(WireModel):
    """An empty scheduling.k8s.io struct whose presence selects an option (``basic: {}``,
    ``single: {}``, ``all: {}``); fields a newer API adds are kept."""


class GangSchedulingPolicy(WireModel):
    """scheduling.k8s.io/v1beta1 GangSchedulingPolicy; JobSet leaves ``minCount`` optional: when
    absent the controller computes it (the represented pod count, KEP-969 defaulting)."""

    min_count: StrictInt | None = Field(default=None, ge=1)


class PodGroupSchedulingPolicy(WireModel):
    """scheduling.k8s.io/v1beta1 PodGroupSchedulingPolicy: exactly one of basic or gang."""

    basic: Choice | None = None
    gang: GangSchedulingPolicy | None = None


class TopologyConstraint(WireModel):
    """scheduling.k8s.io/v1beta1 TopologyConstraint: pods of the group share a node label value."""

    key: str


class PodGroupSchedulingConstraints(WireModel):
    """scheduling.k8s.io/v1beta1 PodGroupSchedulingConstraints (TopologyAwareWorkloadScheduling)."""

    topology: list[TopologyConstraint] = Field(default_factory=list, max_length=1)


class DisruptionMode(WireModel):
    """scheduling.k8s.io/v1beta1 DisruptionMode: exactly one of single or all."""

    single: Choice | None = None
    all: Choice | None = None


class PodGroupResourceClaim(WireModel):
    """scheduling.k8s.io/v1beta1 PodGroupResourceClaim: one claim shared by a PodGroup's pods."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class JobScheduling(WireModel):
    """KEP-969 level 3: every Job (replica) of the targeted ReplicatedJob is its own PodGroup."""

    scheduling_policy: PodGroupSchedulingPolicy | None = None
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    disruption_mode: DisruptionMode | None = None
    resource_claims: list[PodGroupResourceClaim] = Field(default_factory=list, max_length=4)


class ReplicatedJobScheduling(WireModel):
    """KEP-969 level 2: one PodGroup shared by the targeted ReplicatedJobs (or, with ``job``,
    one per Job of the single targeted ReplicatedJob)."""

    target_replicated_jobs: list[str] = Field(default_factory=list, max_length=50)
    scheduling_policy: PodGroupSchedulingPolicy | None = None
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    disruption_mode: DisruptionMode | None = None
    resource_claims: list[PodGroupResourceClaim] = Field(default_factory=list, max_length=4)
    job: JobScheduling | None = None


class JobSetScheduling(WireModel):
    """KEP-969 ``spec.scheduling``: either the top-level fields (one PodGroup for the JobSet) or
    ``replicatedJobs`` (groups per ReplicatedJob), never both (docs/behaviour.md#gang-scheduling).
    """

    scheduling_policy: PodGroupSchedulingPolicy | None = None
    scheduling_constraints: PodGroupSchedulingConstraints | None = None
    disruption_mode: DisruptionMode | None = None
    replicated_jobs: list[ReplicatedJobScheduling] = Field(default_factory=list, max_length=50)


class JobSetSpec(WireModel):
    """The desired state of a JobSet (docs/behaviour.md#spec)."""

    replicated_jobs: list[ReplicatedJob] = Field(default_factory=list)
    network: Network | None = None
    success_policy: SuccessPolicy | None = None
    failure_policy: FailurePolicy | None = None
    startup_policy: StartupPolicy | None = None
    suspend: StrictBool | None = None
    coordinator: Coordinator | None = None
    managed_by: str | None = None
    ttl_seconds_after_finished: StrictInt | None = Field(default=None, ge=0)
    # KEP-1186 (gate JobSetActiveDeadlineSeconds); kept, not enforced, with the gate off.
    active_deadline_seconds: StrictInt | None = Field(default=None, ge=1)
    volume_claim_policies: list[VolumeClaimPolicy] = Field(default_factory=list, max_length=50)
    scheduling: JobSetScheduling | None = None


# --- JobSet status ----------------------------------------------------------------------------


class Condition(WireModel):
    """metav1.Condition; ``lastTransitionTime`` stays the RFC 3339 string of the wire."""

    type: str
    status: ConditionStatus
    observed_generation: StrictInt | None = Field(default=None, ge=0)
    last_transition_time: str
    reason: str
    message: str


class ReplicatedJobStatus(WireModel):
    """Counts of the current attempt's Jobs of one replicatedJob (docs/behaviour.md#status)."""

    name: str
    ready: StrictInt
    succeeded: StrictInt
    failed: StrictInt
    active: StrictInt
    suspended: StrictInt
    job_restarts: list[StrictInt] = Field(default_factory=list, max_length=1024)
    job_restarts_count_towards_max: list[StrictInt] = Field(default_factory=list, max_length=1024)


class JobSetStatus(WireModel):
    """The observed state of a JobSet (docs/behaviour.md#status)."""

    conditions: list[Condition] = Field(default_factory=list)
    restarts: StrictInt = 0
    restarts_count_towards_max: StrictInt = 0
    terminal_state: str = ""
    replicated_jobs_status: list[ReplicatedJobStatus] = Field(default_factory=list)
    previous_in_place_restart_attempt: StrictInt | None = Field(default=None, ge=0)
    current_in_place_restart_attempt: StrictInt | None = Field(default=None, ge=0)
    execution_attempts: StrictInt | None = Field(default=None, ge=0)
    # RFC 3339; written only with the JobSetActiveDeadlineSeconds gate (reconcile.active_deadline).
    start_time: str | None = None


class JobSet(WireModel):
    """A JobSet object as stored by the API server.

    ``api_version`` and ``kind`` read as the JobSet's own but, like every default, are dumped only
    when set; set them when building an object to send.
    """

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSetSpec = Field(default_factory=JobSetSpec)
    status: JobSetStatus = Field(default_factory=JobSetStatus)
