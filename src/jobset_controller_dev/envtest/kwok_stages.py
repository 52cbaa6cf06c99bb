"""kwok's configuration for the full local cluster: how simulated Pods and Nodes behave.

kwok (sigs.k8s.io/kwok, the `kwok` controller binary) plays the kubelet of every Node annotated
`kwok.x-k8s.io/node=fake`. What it does to an object is described by `Stage` objects
(apiVersion kwok.x-k8s.io/v1alpha1): a selector (jq expressions over the object), an optional delay
and a `next` step (a status patch rendered from a Go template, or a delete). On every change of a
managed object kwok picks the stage whose selector matches, waits its delay (restarted when the
object changes meanwhile) and applies it. The stages below are mutually exclusive, so which one
applies never depends on chance.

Pod lifecycle (restartPolicy Never or OnFailure, as in Jobs):

    scheduled --start--> Running, not Ready --ready--> Ready --(run duration)--> Succeeded
                                                              \\-- fail-exit-code --> Failed
    deleted (any phase) --terminate--> Failed (exit 137) --remove--> gone
    deleted, honor-grace  --(until deletionTimestamp)--> Failed (exit 137) --remove--> gone

Annotations a test puts on a pod (or a Job's pod template) to steer it:
    kwok.jobset.test/fail-exit-code: "3"   end Failed, every container exiting 3 (restartPolicy
                                           OnFailure/Always: the containers restart instead,
                                           restartCount + 1 per run duration)
    kwok.jobset.test/run-forever: "true"   stay Running and Ready until deleted
    kwok.jobset.test/run-duration: "500ms" time from Ready to the end (Go duration; default 2s)
    kwok.jobset.test/ready-after: "3s"     time from Running to Ready (default 0)
    kwok.jobset.test/start-after: "1s"     time from scheduled to Running (default 0)
    kwok.jobset.test/honor-grace: "true"   once deleted, keep running until its deletionTimestamp
                                           (the end of its grace period), as a container that
                                           only stops at SIGKILL does; without it a deleted pod
                                           ends at once
    kwok.jobset.test/frozen: "true"        nothing happens to it any more (its kubelet is dead):
                                           no stage applies, so once deleted it stays
                                           Terminating until it is force-deleted

The same `frozen` annotation on a Node stops its node stage: a test that patches the Node's Ready
condition to Unknown (what kube-controller-manager's node lifecycle controller does once a
kubelet's Lease expires) keeps it that way, and that controller then taints the Node
`node.kubernetes.io/unreachable`. kwok keeps renewing the Node's Lease; the node lifecycle
controller reads the Ready condition as it stands, so the taints follow the patched condition.

Pods with restartPolicy Always (plain Pods, Deployments) never end by themselves, as with a real
kubelet. Readiness gates are respected: Ready turns True only when every gate's condition is True
(and back to False if one turns False later).

The whole configuration is generated here (one YAML file with a KwokConfiguration and the Stages,
passed to kwok with --config) so the timings can be chosen per cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from jobset_controller_dev.envtest.nodes import KWOK_NODE_SELECTOR

ANNOTATION_PREFIX = "kwok.jobset.test/"
FAIL_EXIT_CODE_ANNOTATION = ANNOTATION_PREFIX + "fail-exit-code"
RUN_FOREVER_ANNOTATION = ANNOTATION_PREFIX + "run-forever"
RUN_DURATION_ANNOTATION = ANNOTATION_PREFIX + "run-duration"
READY_AFTER_ANNOTATION = ANNOTATION_PREFIX + "ready-after"
START_AFTER_ANNOTATION = ANNOTATION_PREFIX + "start-after"
HONOR_GRACE_ANNOTATION = ANNOTATION_PREFIX + "honor-grace"
FROZEN_ANNOTATION = ANNOTATION_PREFIX + "frozen"

# Exit code of containers killed because their pod was deleted (SIGKILL, as a kubelet reports it).
KILLED_EXIT_CODE = 137

STAGE_API_VERSION = "kwok.x-k8s.io/v1alpha1"
CONFIG_API_VERSION = "config.kwok.x-k8s.io/v1alpha1"

DEFAULT_RUN_DURATION = 2.0
# kwok hands out pod IPs from here, starting at the given address (so never a network address).
DEFAULT_POD_CIDR = "10.244.0.1/16"
# Host IP of pods on a node without an InternalIP (nodes made by the harness always have one).
DEFAULT_NODE_IP = "10.1.255.254"
# kwok renews a Lease in kube-node-lease per node, as a kubelet does (the node lifecycle
# controller takes a node whose Lease expires for dead).
NODE_LEASE_SECONDS = 40


# ----------------------------------------------------------------------------- selectors
def _jq(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"jq": expression}


def _annotation(name: str) -> str:
    return f'.metadata.annotations["{name}"]'


def _condition(kind: str) -> str:
    return f'.status.conditions[]? | select(.type == "{kind}") | .status'


# True when every readiness gate's condition is True (also when there are no gates).
_GATES_PASS = (
    "([.spec.readinessGates[]?.conditionType] - "
    '[.status.conditions[]? | select(.status == "True") | .type]) | length == 0'
)
# True when the Ready condition already says what the readiness gates demand.
_READY_SETTLED = f'([{_condition("Ready")}] | any(. == "True")) == ({_GATES_PASS})'

_NOT_DELETED = _jq(".metadata.deletionTimestamp", "DoesNotExist")
_DELETED = _jq(".metadata.deletionTimestamp", "Exists")
_RUNNING = _jq(".status.phase", "In", "Running")
_TERMINAL = _jq(".status.phase", "In", "Succeeded", "Failed")
_NOT_TERMINAL = _jq(".status.phase", "NotIn", "Succeeded", "Failed")
_CONTAINERS_READY = _jq(_condition("ContainersReady"), "In", "True")
_CONTAINERS_NOT_READY = _jq(_condition("ContainersReady"), "NotIn", "True")
_SETTLED = _jq(_READY_SETTLED, "In", "true")
_UNSETTLED = _jq(_READY_SETTLED, "In", "false")
_NOT_FOREVER = _jq(_annotation(RUN_FOREVER_ANNOTATION), "NotIn", "true")
_FAILS = _jq(_annotation(FAIL_EXIT_CODE_ANNOTATION), "Exists")
_DOES_NOT_FAIL = _jq(_annotation(FAIL_EXIT_CODE_ANNOTATION), "DoesNotExist")
_NOT_FROZEN = _jq(_annotation(FROZEN_ANNOTATION), "NotIn", "true")
_HONORS_GRACE = _jq(_annotation(HONOR_GRACE_ANNOTATION), "In", "true")
_ENDS_AT_ONCE = _jq(_annotation(HONOR_GRACE_ANNOTATION), "NotIn", "true")


# ----------------------------------------------------------------------------- templates
# Go text/template (kwok adds sprig and its own functions: Now, Quote, PodIPWith, NodeIPWith).
# Each renders YAML for the pod's `status`; kwok sends it as a strategic merge patch, so
# conditions merge by type (a null reason/message removes a stale one) and container status lists
# are replaced whole.

_TEMPLATE_START = """
{{- $now := Now }}
{{- $uid := .metadata.uid }}
{{- $hostIP := NodeIPWith .spec.nodeName }}
{{- $podIP := PodIPWith .spec.nodeName (or .spec.hostNetwork false) (or .metadata.uid "")
      (or .metadata.name "") (or .metadata.namespace "") }}
phase: Running
startTime: {{ $now | Quote }}
hostIP: {{ $hostIP | Quote }}
hostIPs: [{ip: {{ $hostIP | Quote }}}]
podIP: {{ $podIP | Quote }}
podIPs: [{ip: {{ $podIP | Quote }}}]
conditions:
- {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- type: ContainersReady
  status: "False"
  reason: ContainersNotReady
  message: containers are starting
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "False"
  reason: ContainersNotReady
  message: containers are starting
  lastTransitionTime: {{ $now | Quote }}
{{- if .spec.initContainers }}
initContainerStatuses:
{{- range .spec.initContainers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  containerID: {{ printf "kwok://%s/%s" $uid .name | Quote }}
  restartCount: 0
  ready: true
{{- if eq (.restartPolicy | default "") "Always" }}
  started: true
  state: {running: {startedAt: {{ $now | Quote }}}}
{{- else }}
  started: false
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{- end }}
{{- end }}
{{- end }}
containerStatuses:
{{- range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  containerID: {{ printf "kwok://%s/%s" $uid .name | Quote }}
  restartCount: 0
  ready: false
  started: true
  state: {running: {startedAt: {{ $now | Quote }}}}
{{- end }}
"""

# Computes $gates: whether every readiness gate's condition is True.
_GATES_SNIPPET = """
{{- $root := . }}
{{- $gates := true }}
{{- range $gate := .spec.readinessGates }}
{{- $ok := false }}
{{- range $c := $root.status.conditions }}
{{- if and (eq $c.type $gate.conditionType) (eq $c.status "True") }}{{ $ok = true }}{{ end }}
{{- end }}
{{- if not $ok }}{{ $gates = false }}{{ end }}
{{- end }}
"""

_READY_CONDITION = """
{{- if $gates }}
- {type: Ready, status: "True", reason: null, message: null, lastTransitionTime: {{ $now | Quote }}}
{{- else }}
- type: Ready
  status: "False"
  reason: ReadinessGatesNotReady
  message: the pod's readiness gates are not all True
  lastTransitionTime: {{ $now | Quote }}
{{- end }}
"""

_TEMPLATE_READY = (
    """
{{- $now := Now }}"""
    + _GATES_SNIPPET
    + """
conditions:
- type: ContainersReady
  status: "True"
  reason: null
  message: null
  lastTransitionTime: {{ $now | Quote }}"""
    + _READY_CONDITION
    + """
containerStatuses:
{{- range .status.containerStatuses }}
{{- $s := deepCopy . }}
{{- $_ := set $s "ready" true }}
{{- $_ := set $s "started" true }}
- {{ toJson $s }}
{{- end }}
"""
)

_TEMPLATE_SETTLE = (
    """
{{- $now := Now }}"""
    + _GATES_SNIPPET
    + """
conditions:"""
    + _READY_CONDITION
)

# Ends the pod: every container terminated with $code. CODE_LINES / PHASE / REASON are filled in
# by Python. Containers are listed from the spec so that a pod deleted before it started ends too.
_TEMPLATE_END = """
{{- $now := Now }}
{{- $uid := .metadata.uid }}
CODE_LINES
{{- $byName := dict }}
{{- range .status.containerStatuses }}{{ $_ := set $byName .name . }}{{ end }}
{{- $initByName := dict }}
{{- range .status.initContainerStatuses }}{{ $_ := set $initByName .name . }}{{ end }}
phase: PHASE
conditions:
- type: ContainersReady
  status: "False"
  reason: PodCompleted
  message: null
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "False"
  reason: PodCompleted
  message: null
  lastTransitionTime: {{ $now | Quote }}
{{- if .spec.initContainers }}
initContainerStatuses:
{{- range .spec.initContainers }}
{{- $old := get $initByName .name | default dict }}
{{- if dig "state" "terminated" "" $old }}
- {{ toJson $old }}
{{- else }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  containerID: {{ get $old "containerID" | default (printf "kwok://%s/%s" $uid .name) | Quote }}
  restartCount: {{ get $old "restartCount" | default 0 }}
  ready: false
  started: false
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ dig "state" "running" "startedAt" $now $old | Quote }}
      finishedAt: {{ $now | Quote }}
{{- end }}
{{- end }}
{{- end }}
containerStatuses:
{{- range .spec.containers }}
{{- $old := get $byName .name | default dict }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  containerID: {{ get $old "containerID" | default (printf "kwok://%s/%s" $uid .name) | Quote }}
  restartCount: {{ get $old "restartCount" | default 0 }}
  ready: false
  started: false
  state:
    terminated:
      exitCode: {{ $code }}
      reason: REASON
      startedAt: {{ dig "state" "running" "startedAt" $now $old | Quote }}
      finishedAt: {{ $now | Quote }}
{{- with get $old "lastState" }}
  lastState: {{ toJson . }}
{{- end }}
{{- end }}
"""

# Template lines that set $code: the exit code named by the annotation (0 or garbage counts as 1).
_CODE_FROM_ANNOTATION = (
    f'{{{{- $code := atoi (index .metadata.annotations "{FAIL_EXIT_CODE_ANNOTATION}") }}}}\n'
    "{{- if eq $code 0 }}{{ $code = 1 }}{{ end }}"
)


def _fixed_code(code: int) -> str:
    return f"{{{{- $code := {code} }}}}"


# restartPolicy OnFailure/Always with a failing container: it exits and is restarted in place.
_TEMPLATE_CRASH = (
    """
{{- $now := Now }}
"""
    + _CODE_FROM_ANNOTATION
    + """
containerStatuses:
{{- range .status.containerStatuses }}
{{- $s := deepCopy . }}
{{- $last := dict "exitCode" $code "reason" "Error" "finishedAt" $now
      "startedAt" (dig "state" "running" "startedAt" $now .) }}
{{- $_ := set $s "restartCount" (add1 (.restartCount | default 0)) }}
{{- $_ := set $s "lastState" (dict "terminated" $last) }}
{{- $_ := set $s "state" (dict "running" (dict "startedAt" $now)) }}
- {{ toJson $s }}
{{- end }}
"""
)


def _end_template(code_lines: str, phase: str, reason: str) -> str:
    return (
        _TEMPLATE_END.replace("CODE_LINES", code_lines)
        .replace("PHASE", phase)
        .replace("REASON", reason)
    )


def _status_patch(template: str) -> dict[str, Any]:
    return {"patches": [{"subresource": "status", "root": "status", "template": template}]}


def _delay(default_seconds: float, annotation: str | None = None) -> dict[str, Any]:
    delay: dict[str, Any] = {"durationMilliseconds": round(default_seconds * 1000)}
    if annotation:
        delay["durationFrom"] = {"jq": {"expression": _annotation(annotation)}}
    return delay


def _stage(
    name: str,
    kind: str,
    selector: Sequence[Mapping[str, Any]],
    next_step: Mapping[str, Any],
    delay: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": [dict(s) for s in selector]},
        "next": dict(next_step),
    }
    if delay is not None:
        spec["delay"] = dict(delay)
    return {
        "apiVersion": STAGE_API_VERSION,
        "kind": "Stage",
        "metadata": {"name": f"jobset-{name}"},
        "spec": spec,
    }


# ----------------------------------------------------------------------------- stages
def pod_stages(
    *, run_duration: float = DEFAULT_RUN_DURATION, start_delay: float = 0.0
) -> list[dict[str, Any]]:
    """The Pod stages (see the module docstring); times in seconds, overridable per pod. No
    stage applies to a frozen pod."""
    stages = [
        _stage(
            "pod-start",
            "Pod",
            [_NOT_DELETED, _NOT_TERMINAL, _jq(".status.podIP", "DoesNotExist")],
            _status_patch(_TEMPLATE_START),
            _delay(start_delay, START_AFTER_ANNOTATION),
        ),
        _stage(
            "pod-ready",
            "Pod",
            [_NOT_DELETED, _RUNNING, _CONTAINERS_NOT_READY],
            _status_patch(_TEMPLATE_READY),
            _delay(0, READY_AFTER_ANNOTATION),
        ),
        _stage(
            "pod-readiness-gates",
            "Pod",
            [_NOT_DELETED, _RUNNING, _CONTAINERS_READY, _UNSETTLED],
            _status_patch(_TEMPLATE_SETTLE),
        ),
        _stage(
            "pod-succeed",
            "Pod",
            [
                _NOT_DELETED,
                _RUNNING,
                _CONTAINERS_READY,
                _SETTLED,
                _NOT_FOREVER,
                _DOES_NOT_FAIL,
                _jq(".spec.restartPolicy", "NotIn", "Always"),
            ],
            _status_patch(_end_template(_fixed_code(0), "Succeeded", "Completed")),
            _delay(run_duration, RUN_DURATION_ANNOTATION),
        ),
        _stage(
            "pod-fail",
            "Pod",
            [
                _NOT_DELETED,
                _RUNNING,
                _CONTAINERS_READY,
                _SETTLED,
                _NOT_FOREVER,
                _FAILS,
                _jq(".spec.restartPolicy", "In", "Never"),
            ],
            _status_patch(_end_template(_CODE_FROM_ANNOTATION, "Failed", "Error")),
            _delay(run_duration, RUN_DURATION_ANNOTATION),
        ),
        _stage(
            "pod-crash-restart",
            "Pod",
            [
                _NOT_DELETED,
                _RUNNING,
                _CONTAINERS_READY,
                _SETTLED,
                _NOT_FOREVER,
                _FAILS,
                _jq(".spec.restartPolicy", "NotIn", "Never"),
            ],
            _status_patch(_TEMPLATE_CRASH),
            _delay(run_duration, RUN_DURATION_ANNOTATION),
        ),
        _stage(
            "pod-terminate",
            "Pod",
            [_DELETED, _NOT_TERMINAL, _ENDS_AT_ONCE],
            _status_patch(_end_template(_fixed_code(KILLED_EXIT_CODE), "Failed", "Error")),
        ),
        # The time until a timestamp is kwok's delay for an RFC 3339 value: the pod ends when
        # its grace period does (a force delete, grace 0, moves deletionTimestamp to now).
        _stage(
            "pod-terminate-after-grace",
            "Pod",
            [_DELETED, _NOT_TERMINAL, _HONORS_GRACE],
            _status_patch(_end_template(_fixed_code(KILLED_EXIT_CODE), "Failed", "Error")),
            {
                "durationMilliseconds": 0,
                "durationFrom": {"jq": {"expression": ".metadata.deletionTimestamp"}},
            },
        ),
        # Deleting with grace period 0 removes a terminal pod now, or as soon as its last
        # finalizer (e.g. the Job controller's batch.kubernetes.io/job-tracking) is removed.
        _stage("pod-remove", "Pod", [_DELETED, _TERMINAL], {"delete": True}),
    ]
    for stage in stages:
        stage["spec"]["selector"]["matchExpressions"].append(dict(_NOT_FROZEN))
    return stages


_TEMPLATE_NODE_READY = """
{{- $now := Now }}
phase: Running
conditions:
- type: Ready
  status: "True"
  reason: KubeletReady
  message: kubelet is posting ready status (simulated by kwok)
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
- type: MemoryPressure
  status: "False"
  reason: KubeletHasSufficientMemory
  message: kubelet has sufficient memory available
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
- type: DiskPressure
  status: "False"
  reason: KubeletHasNoDiskPressure
  message: kubelet has no disk pressure
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
- type: PIDPressure
  status: "False"
  reason: KubeletHasSufficientPID
  message: kubelet has sufficient PID available
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
- type: NetworkUnavailable
  status: "False"
  reason: RouteCreated
  message: simulated network
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
daemonEndpoints: {kubeletEndpoint: {Port: 10250}}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  osImage: kwok simulated node
  kernelVersion: kwok
  containerRuntimeVersion: kwok://KWOK_VERSION
  kubeletVersion: KUBELET_VERSION
  machineID: ""
  systemUUID: ""
  bootID: ""
"""


def node_stages(*, kubelet_version: str, kwok_version: str) -> list[dict[str, Any]]:
    """One Node stage: a managed Node that is not Ready becomes Ready (kwok renews its Lease),
    unless it is frozen (module docstring)."""
    template = _TEMPLATE_NODE_READY.replace("KUBELET_VERSION", kubelet_version).replace(
        "KWOK_VERSION", kwok_version
    )
    return [
        _stage(
            "node-ready",
            "Node",
            [_jq(_condition("Ready"), "NotIn", "True"), _NOT_FROZEN],
            _status_patch(template),
        )
    ]


def kwok_configuration(
    *,
    cidr: str = DEFAULT_POD_CIDR,
    node_ip: str = DEFAULT_NODE_IP,
    node_lease_seconds: int = NODE_LEASE_SECONDS,
) -> dict[str, Any]:
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "KwokConfiguration",
        "options": {
            "cidr": cidr,
            "nodeIP": node_ip,
            "manageNodesWithAnnotationSelector": KWOK_NODE_SELECTOR,
            "nodeLeaseDurationSeconds": node_lease_seconds,
            "podPlayStageParallelism": 8,
            "nodePlayStageParallelism": 4,
        },
    }


class _LiteralDumper(yaml.SafeDumper):
    """Dumps multi-line strings (the templates) as literal blocks, so the file stays readable."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def render_config(
    *,
    kubelet_version: str,
    kwok_version: str,
    run_duration: float = DEFAULT_RUN_DURATION,
    start_delay: float = 0.0,
    cidr: str = DEFAULT_POD_CIDR,
    node_lease_seconds: int = NODE_LEASE_SECONDS,
) -> str:
    """The multi-document YAML kwok reads with --config: a KwokConfiguration, then the Stages."""
    documents = [
        kwok_configuration(cidr=cidr, node_lease_seconds=node_lease_seconds),
        *node_stages(kubelet_version=kubelet_version, kwok_version=kwok_version),
        *pod_stages(run_duration=run_duration, start_delay=start_delay),
    ]
    return yaml.dump_all(documents, Dumper=_LiteralDumper, sort_keys=False, width=200)


def write_config(path: Path, **options: Any) -> Path:
    path.write_text(render_config(**options))
    return path
