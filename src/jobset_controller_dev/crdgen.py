"""Generate the JobSet CRD manifest (manifests/crd/bases/jobset.x-k8s.io_jobsets.yaml).

The JobSet part of the schema is written here by hand, from the contract (field names, defaults,
list-map keys, maxItems, CEL rules, printer columns). The embedded batch/v1 JobTemplateSpec and
the core/v1 PersistentVolumeClaim of volumeClaimPolicies are NOT written by hand: they come from
the OpenAPI v3 document of a real kube-apiserver of the pinned version, turned into a structural
schema. So an invalid pod template is rejected at admission with its field path, exactly as the
apiserver would reject it on a Job, and a Kubernetes upgrade is one regeneration away.

Run: `python -m jobset_controller_dev.crdgen` or `make crd` (starts a throwaway apiserver).
The output is deterministic: regenerating against the same apiserver version is a no-op (tested).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from jobset_controller.api.constants import (
    DEFAULT_GROUP_NAME,
    JOBSET_CONTROLLER_NAME,
    ConditionStatus,
    DependsOnStatus,
    FailurePolicyAction,
    Operator,
    RestartStrategy,
    RetentionWhenDeleted,
    StartupPolicyOrder,
    TerminalState,
)

Schema = dict[str, Any]

CRD_FILE = "jobset.x-k8s.io_jobsets.yaml"

# Keys of an OpenAPI schema that a CRD structural schema may carry; everything else is dropped
# (x-kubernetes-patch-*, x-kubernetes-group-version-kind, nullable, ...).
_KEPT_KEYS = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
)

_INT_OR_STRING: Schema = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
_QUANTITY: Schema = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": (
        r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
        r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
    ),
    "x-kubernetes-int-or-string": True,
}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}

# Embedded ObjectMeta keeps only what controller-gen's generateEmbeddedObjectMeta keeps, so
# labels and annotations of templates are validated and kept, and nothing else is pruned wrongly.
_EMBEDDED_OBJECT_META: Schema = {
    "type": "object",
    "properties": {
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "labels": _STRING_MAP,
        "name": {"type": "string"},
        "namespace": {"type": "string"},
    },
}

_SPECIAL_REFS: dict[str, Schema] = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": _EMBEDDED_OBJECT_META,
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": _INT_OR_STRING,
    "io.k8s.apimachinery.pkg.api.resource.Quantity": _QUANTITY,
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    },
}


# Pod-template structs upstream's CRD marks `x-kubernetes-map-type: atomic` although the API
# server's OpenAPI does not: each inlines the atomic core/v1 LocalObjectReference, and
# controller-gen carries an inlined struct's markers over to the struct that embeds it. Server-side
# apply replaces an atomic struct whole and merges any other field by field, so without the mark
# a client's apply (Kubeflow Trainer's, for one) owns other fields here than on upstream's CRD.
UPSTREAM_ATOMIC_STRUCTS = frozenset(
    {
        "io.k8s.api.core.v1.ConfigMapVolumeSource",  # volumes[].configMap
        "io.k8s.api.core.v1.ConfigMapProjection",  # volumes[].projected.sources[].configMap
        "io.k8s.api.core.v1.SecretProjection",  # volumes[].projected.sources[].secret
        "io.k8s.api.core.v1.ConfigMapEnvSource",  # *containers[].envFrom[].configMapRef
        "io.k8s.api.core.v1.SecretEnvSource",  # *containers[].envFrom[].secretRef
    }
)


def _is_empty_default(value: Any) -> bool:
    return value in ({}, [], "", 0, False, None)


class StructuralConverter:
    """Turns OpenAPI v3 component schemas into CRD structural schemas (refs inlined)."""

    def __init__(self, components: Mapping[str, Schema], *, descriptions: bool = True) -> None:
        self._components = components
        self._descriptions = descriptions

    def convert_ref(self, name: str) -> Schema:
        return self.convert({"$ref": f"#/components/schemas/{name}"})

    def convert(self, schema: Schema, stack: tuple[str, ...] = ()) -> Schema:
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf", ())) == 1:
            # k8s publishes `allOf: [{$ref}]` to attach a description/default to a reference.
            ref = schema["allOf"][0].get("$ref")
        if ref is not None:
            name = ref.rsplit("/", 1)[-1]
            if name in stack:
                raise ValueError(f"recursive schema {' -> '.join((*stack, name))}")
            if name in _SPECIAL_REFS:
                out = copy.deepcopy(_SPECIAL_REFS[name])
            else:
                out = self.convert(self._components[name], (*stack, name))
            if name in UPSTREAM_ATOMIC_STRUCTS:
                out["x-kubernetes-map-type"] = "atomic"
            self._copy_annotations(schema, out)
            return out
        out = {}
        for key in _KEPT_KEYS:
            if key in schema:
                out[key] = copy.deepcopy(schema[key])
        if not self._descriptions:
            out.pop("description", None)
        if _is_empty_default(out.get("default")):
            out.pop("default", None)
        if "properties" in schema:
            out["properties"] = {
                k: self.convert(v, stack) for k, v in sorted(schema["properties"].items())
            }
            out.setdefault("type", "object")
        if isinstance(schema.get("additionalProperties"), dict):
            out["additionalProperties"] = self.convert(schema["additionalProperties"], stack)
            out.setdefault("type", "object")
        if "items" in schema:
            out["items"] = self.convert(schema["items"], stack)
            out.setdefault("type", "array")
            self._keep_list_map_key_defaults(schema["items"], out)
        if out.get("format") == "int-or-string":
            return {
                **_INT_OR_STRING,
                **({"description": out["description"]} if "description" in out else {}),
            }
        if "required" in out:
            out["required"] = sorted(out["required"])
        return out

    def _keep_list_map_key_defaults(self, items: Schema, out: Schema) -> None:
        """A list-map key must be required or defaulted, even when its default is empty ("")."""
        converted = out["items"]
        for key in out.get("x-kubernetes-list-map-keys", ()):
            prop = converted.get("properties", {}).get(key)
            if prop is None or key in converted.get("required", ()) or "default" in prop:
                continue
            source = self._resolve(items).get("properties", {}).get(key, {})
            if "default" in source:
                prop["default"] = copy.deepcopy(source["default"])

    def _resolve(self, schema: Schema) -> Schema:
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf", ())) == 1:
            ref = schema["allOf"][0].get("$ref")
        return self._resolve(self._components[ref.rsplit("/", 1)[-1]]) if ref else schema

    def _copy_annotations(self, wrapper: Schema, out: Schema) -> None:
        if self._descriptions and "description" in wrapper:
            out["description"] = wrapper["description"]
        default = wrapper.get("default")
        if not _is_empty_default(default):
            out["default"] = copy.deepcopy(default)


# --------------------------------------------------------------------------- the JobSet schema


def _immutable() -> list[Schema]:
    return [{"rule": "self == oldSelf", "message": "Value is immutable"}]


def _int32(description: str, **extra: Any) -> Schema:
    return {"description": description, "type": "integer", "format": "int32", **extra}


def _string(description: str, **extra: Any) -> Schema:
    return {"description": description, "type": "string", **extra}


def _atomic_strings(description: str) -> Schema:
    return {
        "description": description,
        "type": "array",
        "items": {"type": "string"},
        "x-kubernetes-list-type": "atomic",
    }


def _choice(description: str) -> Schema:
    return {"description": description, "type": "object"}


def _one_of(first: str, second: str) -> list[Schema]:
    return [
        {
            "rule": f"has(self.{first}) != has(self.{second})",
            "message": f"exactly one of {first} or {second} must be set",
        }
    ]


def _pod_group_fields(claims: bool) -> dict[str, Schema]:
    """The PodGroupTemplate fields of scheduling.k8s.io/v1beta1 that spec.scheduling carries
    (KEP-969). Written by hand: the apiserver `make crd` starts does not serve that API (it is off
    by default in 1.37), so its OpenAPI has no schema to copy; the shapes follow k8s.io/api
    v0.37.2, and the e2e on a 1.37.2 apiserver with the API on accepts what they produce."""
    fields: dict[str, Schema] = {
        "schedulingPolicy": {
            "description": "basic or gang (default gang; minCount defaults to the pods the "
            "group represents).",
            "type": "object",
            "properties": {
                "basic": _choice("Standard scheduling, pod by pod."),
                "gang": {
                    "description": "All-or-nothing scheduling.",
                    "type": "object",
                    "properties": {
                        "minCount": _int32(
                            "Pods that must fit at once; computed when unset.", minimum=1
                        ),
                    },
                },
            },
            "x-kubernetes-validations": _one_of("basic", "gang"),
        },
        "schedulingConstraints": {
            "description": "Topology constraints of the group (TopologyAwareWorkloadScheduling).",
            "type": "object",
            "properties": {
                "topology": {
                    "type": "array",
                    "maxItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {"key": _string("A node label key.")},
                        "required": ["key"],
                    },
                    "x-kubernetes-list-type": "atomic",
                },
            },
        },
        "disruptionMode": {
            "description": "single or all: how the group's pods may be disrupted.",
            "type": "object",
            "properties": {
                "single": _choice("Pods are disrupted one by one."),
                "all": _choice("The group is disrupted as a whole."),
            },
            "x-kubernetes-validations": _one_of("single", "all"),
        },
    }
    if claims:
        fields["resourceClaims"] = {
            "description": "DRA claims shared by the group's pods (DRAWorkloadResourceClaims).",
            "type": "array",
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "name": _string("The claim's name inside the PodGroup."),
                    "resourceClaimName": _string("An existing ResourceClaim."),
                    "resourceClaimTemplateName": _string(
                        "A ResourceClaimTemplate turned into one claim per PodGroup."
                    ),
                },
                "required": ["name"],
            },
            "x-kubernetes-list-type": "atomic",
        }
    return fields


def _scheduling_schema() -> Schema:
    """spec.scheduling (KEP-969, gate JobSetWorkloadAwareSchedulingAPI)."""
    return {
        "description": "Workload-Aware Scheduling (alpha, gate JobSetWorkloadAwareSchedulingAPI, "
        "Kubernetes >= 1.37): either the top-level fields (one PodGroup for the JobSet) or "
        "replicatedJobs (PodGroups per ReplicatedJob).",
        "type": "object",
        "properties": {
            **_pod_group_fields(claims=False),
            "replicatedJobs": {
                "description": "Per-ReplicatedJob groups; each ReplicatedJob is targeted once.",
                "type": "array",
                "maxItems": 50,
                "items": {
                    "type": "object",
                    "properties": {
                        "targetReplicatedJobs": {
                            "description": "The ReplicatedJobs sharing this group.",
                            "type": "array",
                            "maxItems": 50,
                            "items": {"type": "string"},
                            "x-kubernetes-list-type": "atomic",
                        },
                        **_pod_group_fields(claims=True),
                        "job": {
                            "description": "One group per Job of the single targeted "
                            "ReplicatedJob.",
                            "type": "object",
                            "properties": _pod_group_fields(claims=True),
                        },
                    },
                },
                "x-kubernetes-list-type": "atomic",
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "!(has(self.replicatedJobs) && size(self.replicatedJobs) > 0 && "
                "(has(self.schedulingPolicy) || has(self.schedulingConstraints) || "
                "has(self.disruptionMode)))",
                "message": "cannot set schedulingPolicy, schedulingConstraints, or "
                "disruptionMode together with replicatedJobs",
            }
        ],
    }


def _condition_schema() -> Schema:
    """metav1.Condition, as every Kubernetes API publishes it."""
    return {
        "description": "An observation of one aspect of the JobSet's state.",
        "type": "object",
        "properties": {
            "lastTransitionTime": {
                "description": "When the condition last changed from one status to another.",
                "type": "string",
                "format": "date-time",
            },
            "message": {
                "description": "Human-readable details.",
                "type": "string",
                "maxLength": 32768,
            },
            "observedGeneration": {
                "description": "The .metadata.generation the condition was set for.",
                "type": "integer",
                "format": "int64",
                "minimum": 0,
            },
            "reason": {
                "description": "A CamelCase reason for the last transition.",
                "type": "string",
                "maxLength": 1024,
                "minLength": 1,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            },
            "status": {
                "description": "True, False or Unknown.",
                "type": "string",
                "enum": _values(ConditionStatus),
            },
            "type": {
                "description": "The condition type, e.g. Completed, Failed, Suspended.",
                "type": "string",
                "maxLength": 316,
                "pattern": (
                    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                ),
            },
        },
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    }


def _status_schema() -> Schema:
    per_index: Schema = {
        "type": "array",
        "items": {"type": "integer", "format": "int32"},
        "maxItems": 1024,
        "x-kubernetes-list-type": "atomic",
    }
    return {
        "description": "The observed state of the JobSet.",
        "type": "object",
        "properties": {
            "conditions": {
                "type": "array",
                "items": _condition_schema(),
                "x-kubernetes-list-map-keys": ["type"],
                "x-kubernetes-list-type": "map",
            },
            "currentInPlaceRestartAttempt": _int32(
                "In-place restart attempt all pods have reached (InPlaceRestart gate).", minimum=0
            ),
            "executionAttempts": _int32(
                "Runs of the JobSet so far, counting from 0: each resume after a suspension and "
                "each global restart starts one (ExecutionAttemptsTracking gate).",
                minimum=0,
            ),
            "previousInPlaceRestartAttempt": _int32(
                "Pods at or below this in-place attempt must restart (InPlaceRestart gate).",
                minimum=0,
            ),
            "replicatedJobsStatus": {
                "description": "Job counts per replicatedJob, for the current restart attempt.",
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "active": _int32("Jobs with at least one active pod."),
                        "failed": _int32("Failed Jobs."),
                        "jobRestarts": {
                            **per_index,
                            "description": "Individual restarts per job index (RestartJob gate).",
                        },
                        "jobRestartsCountTowardsMax": {
                            **per_index,
                            "description": "Individual restarts per job index that count towards "
                            "maxRestarts (RestartJob gate).",
                        },
                        "name": _string("Name of the replicatedJob."),
                        "ready": _int32("Active Jobs whose pods are ready or succeeded."),
                        "succeeded": _int32("Completed Jobs."),
                        "suspended": _int32("Active Jobs that are suspended."),
                    },
                    "required": ["active", "failed", "name", "ready", "succeeded", "suspended"],
                },
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
            },
            "restarts": _int32("Number of times the whole JobSet was restarted."),
            "restartsCountTowardsMax": _int32("Restarts that count towards maxRestarts."),
            "startTime": {
                "description": "When the current run started: set when the JobSet runs, removed "
                "while it is suspended, reset by a global restart (JobSetActiveDeadlineSeconds "
                "gate).",
                "type": "string",
                "format": "date-time",
            },
            "terminalState": _string(
                "Final state of the JobSet: " + " or ".join(_values(TerminalState)) + "."
            ),
        },
    }


def _values(choices: type[StrEnum]) -> list[str]:
    """An enum's values in declaration order (api/constants.py owns them)."""
    return [choice.value for choice in choices]


def _coordinator_schema() -> Schema:
    return {
        "description": "A pod whose stable network endpoint is written into every Job "
        "and pod as the jobset.sigs.k8s.io/coordinator label and annotation.",
        "type": "object",
        "properties": {
            "jobIndex": {"description": "Job index of the coordinator.", "type": "integer"},
            "podIndex": {"description": "Pod index of the coordinator.", "type": "integer"},
            "replicatedJob": _string("replicatedJob holding the coordinator."),
        },
        "required": ["replicatedJob"],
    }


def _failure_policy_schema() -> Schema:
    rule: Schema = {
        "type": "object",
        "properties": {
            "action": _string(
                "The action to take when the rule matches.", enum=_values(FailurePolicyAction)
            ),
            "name": _string("Rule name, used in the RestartingJobSet reason."),
            "onJobFailureMessagePatterns": _atomic_strings(
                "Regular expressions searched in the Job's failure message."
            ),
            "onJobFailureReasons": {
                "description": "Job failure reasons the rule applies to.",
                "type": "array",
                "items": {"type": "string"},
            },
            "targetReplicatedJobs": _atomic_strings(
                "replicatedJobs the rule applies to; empty means all."
            ),
        },
        "required": ["action", "name"],
    }
    return {
        "description": "What to do when a child Job fails. Without it, any failed Job "
        "fails the JobSet.",
        "type": "object",
        "properties": {
            "maxRestarts": _int32("How many restarts that count are allowed."),
            "restartStrategy": _string(
                "How Jobs are recreated on restart.",
                default=RestartStrategy.RECREATE.value,
                enum=_values(RestartStrategy),
            ),
            "rules": {
                "description": "Rules matched in order against failed Jobs; the first "
                "match decides the action.",
                "type": "array",
                "items": rule,
            },
        },
        "x-kubernetes-validations": _immutable(),
    }


def _network_schema() -> Schema:
    return {
        "description": "Pod-to-pod networking through a headless Service.",
        "type": "object",
        "properties": {
            "enableDNSHostnames": {
                "description": "Give pods DNS hostnames through a headless Service.",
                "type": "boolean",
            },
            "publishNotReadyAddresses": {
                "description": "Publish DNS records of pods before they are ready.",
                "type": "boolean",
            },
            "subdomain": _string("Name of the headless Service; defaults to the JobSet name."),
        },
        "x-kubernetes-validations": _immutable(),
    }


def _replicated_jobs_schema(job_template: Schema) -> Schema:
    depends_on: Schema = {
        "description": "replicatedJobs that must reach a status before this one is created.",
        "type": "array",
        "maxItems": 5,
        "items": {
            "type": "object",
            "properties": {
                "name": _string("Name of the replicatedJob depended on."),
                "status": _string(
                    "Status the dependency must reach.", enum=_values(DependsOnStatus)
                ),
            },
            "required": ["name", "status"],
        },
        "x-kubernetes-list-map-keys": ["name"],
        "x-kubernetes-list-type": "map",
        "x-kubernetes-validations": _immutable(),
    }
    return {
        "description": "Groups of identical Jobs created from one template.",
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "dependsOn": depends_on,
                "groupName": _string(
                    "Group used for the group-name/group-replicas/job-group-index labels.",
                    default=DEFAULT_GROUP_NAME,
                ),
                "name": _string("Name of the replicatedJob, part of each Job's name."),
                "replicas": _int32("Number of Jobs to create.", default=1, minimum=0),
                "template": job_template,
            },
            "required": ["name", "template"],
        },
        "x-kubernetes-list-map-keys": ["name"],
        "x-kubernetes-list-type": "map",
    }


def _startup_policy_schema() -> Schema:
    orders = _values(StartupPolicyOrder)
    return {
        "description": "Deprecated (use dependsOn): create replicatedJobs in order.",
        "type": "object",
        "properties": {
            "startupPolicyOrder": _string(" or ".join(orders) + ".", enum=orders),
        },
        "required": ["startupPolicyOrder"],
        "x-kubernetes-validations": _immutable(),
    }


def _success_policy_schema() -> Schema:
    operators = _values(Operator)
    return {
        "description": "When the JobSet counts as completed.",
        "type": "object",
        "properties": {
            "operator": _string(" or ".join(operators) + " of the targeted Jobs.", enum=operators),
            "targetReplicatedJobs": _atomic_strings("replicatedJobs that count; empty means all."),
        },
        "required": ["operator"],
        "x-kubernetes-validations": _immutable(),
    }


def _volume_claim_policies_schema(pvc: Schema) -> Schema:
    pvc_template = copy.deepcopy(pvc)
    pvc_template.pop("description", None)
    when_deleted = _values(RetentionWhenDeleted)
    return {
        "description": "PersistentVolumeClaims created for the JobSet and mounted into its pods.",
        "type": "array",
        "maxItems": 50,
        "items": {
            "type": "object",
            "properties": {
                "retentionPolicy": {
                    "description": "What happens to the claims when the JobSet is deleted.",
                    "type": "object",
                    "properties": {
                        "whenDeleted": _string(
                            " or ".join(when_deleted) + ".",
                            default=RetentionWhenDeleted.DELETE.value,
                            enum=when_deleted,
                        ),
                    },
                },
                "templates": {
                    "description": "Claim templates; each claim is named "
                    "<template name>-<JobSet name>.",
                    "type": "array",
                    "maxItems": 50,
                    "items": pvc_template,
                    "x-kubernetes-list-type": "atomic",
                },
            },
            "required": ["templates"],
            "x-kubernetes-validations": [
                {
                    "rule": "self.templates.all(t, !has(t.metadata.namespace) || "
                    "size(t.metadata.namespace) == 0)",
                    "message": "namespace cannot be set for VolumeClaimPolicies templates",
                }
            ],
        },
        "x-kubernetes-list-type": "atomic",
        "x-kubernetes-validations": _immutable(),
    }


def _spec_schema(job_template: Schema, pvc: Schema) -> Schema:
    """spec: one function per field group above; the cross-field rule here."""
    in_order = StartupPolicyOrder.IN_ORDER.value
    return {
        "description": "The desired state of the JobSet.",
        "type": "object",
        "properties": {
            "activeDeadlineSeconds": {
                "description": "Fail the JobSet once it has run this many seconds since "
                "status.startTime (JobSetActiveDeadlineSeconds gate); may be changed at any time.",
                "type": "integer",
                "format": "int64",
                "minimum": 1,
            },
            "coordinator": _coordinator_schema(),
            "failurePolicy": _failure_policy_schema(),
            "managedBy": _string(
                "The controller that manages this JobSet; any value other than "
                f"{JOBSET_CONTROLLER_NAME} makes this controller ignore it."
            ),
            "network": _network_schema(),
            "replicatedJobs": _replicated_jobs_schema(job_template),
            "startupPolicy": _startup_policy_schema(),
            "successPolicy": _success_policy_schema(),
            "scheduling": _scheduling_schema(),
            "suspend": {
                "description": "Suspend the JobSet and its Jobs (used by Kueue).",
                "type": "boolean",
            },
            "ttlSecondsAfterFinished": _int32(
                "Delete the JobSet this many seconds after it completed or failed.", minimum=0
            ),
            "volumeClaimPolicies": _volume_claim_policies_schema(pvc),
        },
        "x-kubernetes-validations": [
            {
                "rule": "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == "
                f"'{in_order}' && self.replicatedJobs.exists(x, has(x.dependsOn)))",
                "message": "StartupPolicy and DependsOn APIs are mutually exclusive",
            }
        ],
    }


def build_crd(batch_v1: Mapping[str, Any], core_v1: Mapping[str, Any]) -> dict[str, Any]:
    """The whole CRD object from the apiserver's OpenAPI v3 documents for batch/v1 and core/v1."""
    job_template = StructuralConverter(batch_v1["components"]["schemas"]).convert_ref(
        "io.k8s.api.batch.v1.JobTemplateSpec"
    )
    job_template["description"] = "The template of each Job of this replicatedJob."
    pvc = StructuralConverter(core_v1["components"]["schemas"]).convert_ref(
        "io.k8s.api.core.v1.PersistentVolumeClaim"
    )
    # The templates are whole core/v1 PersistentVolumeClaims, as upstream's Go type declares them
    # (apiVersion/kind included), so manifests that spell them out are neither pruned nor refused.
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "jobsets.jobset.x-k8s.io",
            "annotations": {"jobset.x-k8s.io/generated-by": "jobset_controller_dev.crdgen"},
        },
        "spec": {
            "group": "jobset.x-k8s.io",
            "names": {
                "kind": "JobSet",
                "listKind": "JobSetList",
                "plural": "jobsets",
                "singular": "jobset",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha2",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {
                            "name": "TerminalState",
                            "type": "string",
                            "description": "Final state of JobSet",
                            "jsonPath": ".status.terminalState",
                        },
                        {
                            "name": "Restarts",
                            "type": "string",
                            "description": "Number of restarts",
                            "jsonPath": ".status.restarts",
                        },
                        {
                            "name": "Completed",
                            "type": "string",
                            "jsonPath": '.status.conditions[?(@.type=="Completed")].status',
                        },
                        {
                            "name": "Suspended",
                            "type": "string",
                            "description": "JobSet suspended",
                            "jsonPath": ".spec.suspend",
                        },
                        {
                            "name": "Age",
                            "type": "date",
                            "description": "Time this JobSet was created",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "description": "JobSet runs a group of Kubernetes Jobs as one "
                            "workload.",
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": _spec_schema(job_template, pvc),
                                "status": _status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render(crd: Mapping[str, Any]) -> str:
    header = (
        "# Generated by `python -m jobset_controller_dev.crdgen` from the JobSet schema in\n"
        "# src/jobset_controller_dev/crdgen.py and the kube-apiserver OpenAPI v3 documents.\n"
        "# Do not edit by hand.\n"
    )
    body = yaml.safe_dump(dict(crd), sort_keys=False, width=100, allow_unicode=True)
    return header + "---\n" + body


def fetch_openapi(plane: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch/v1 and core/v1 OpenAPI v3 documents of a running control plane."""
    documents = []
    for path in ("/openapi/v3/apis/batch/v1", "/openapi/v3/api/v1"):
        status, body = plane.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path} returned {status}")
        documents.append(body)
    return documents[0], documents[1]


def main(argv: list[str] | None = None) -> int:
    from jobset_controller_dev.envtest import ControlPlane
    from jobset_controller_dev.envtest.binaries import repo_root

    parser = argparse.ArgumentParser(prog="python -m jobset_controller_dev.crdgen")
    root = repo_root()
    default_out = root / "manifests" / "crd" / "bases" / CRD_FILE if root else Path(CRD_FILE)
    parser.add_argument("--output", type=Path, default=default_out)
    args = parser.parse_args(argv)
    with ControlPlane(crd_paths=[]) as plane:
        batch_v1, core_v1 = fetch_openapi(plane)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(build_crd(batch_v1, core_v1)))
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
