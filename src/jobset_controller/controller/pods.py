"""The pod controller of exclusive placement: trimmed pod and node caches, one key per Job.

See docs/behaviour.md#exclusive-placement. What it caches, and why so little:

- Pods: JobSet pods only (the server-side label selector `jobset.sigs.k8s.io/job-key`, which
  every pod of a JobSet's Job carries, also one made by hand out of the webhooks' sight without
  the jobset-name label; upstream's pod controller finds a Job's pods by it too), and of those
  only the ones placed by leader and followers
  (`placed_by_leader`: the exclusive-topology annotation, as upstream decides, so the pods of
  Jobs upstream created before an upgrade are placed and repaired too; a Job's pods cannot be
  told apart by label, so the watch carries every JobSet pod and the others are dropped on
  arrival, never stored). Of each kept pod only what the webhooks and `reconcile.pod_placement`
  read (`trim_pod`): name, uid, resourceVersion, deletion, the JobSet name labels, the placement
  annotations, the controller owner's uid, the node name, the topology selector, the scheduling
  gates, the phase and a DisruptionTarget condition. Everything else (containers, volumes, env,
  status details) is dropped on arrival.
- Nodes: name and labels (`trim_node`); a node's domain is all anyone reads.

With the InPlaceRestart gate on, the same watch also keeps every pod that carries the jobset-name
label, trimmed to what the JobSet controller's in-place pass reads (`trim_in_place`: name, uid,
resourceVersion, the jobset-name label, the in-place attempt annotation, the phase and the
largest container `restartCount`), indexed by `<namespace>/<jobset name>` (`JOBSET_PODS`); each
change of those facts is handed to `on_jobset_pod` (the JobSet controller, which wakes the JobSet
if it uses the strategy). A pod placed by leader and followers keeps both sets of fields.

The key of the work queue is `<namespace>/<Job uid>`: every change of one of the Job's pods wakes
it, and so does a change of the labels of a node a leader is bound to. The pass reads the Job's
pods from the cache, asks the pure `plan_pods`, and carries the plan out: release patches
(a strategic merge patch that deletes only our gate, so other gates are never overwritten),
evictions (DisruptionTarget through the status subresource, then delete with the pod's uid as
precondition), Warning events on leaders whose domain cannot be read.

The same caches answer the pod webhooks' lookups (`lookups`): the leader by name without suffix,
a node's labels.
"""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from jobset_controller.api import (
    EXCLUSIVE_KEY,
    IN_PLACE_RESTART_ATTEMPT_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOBSET_NAME_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    REPLICATED_JOB_NAME_KEY,
)
from jobset_controller.api.placement import (
    COMPLETION_INDEX_ANNOTATION,
    PLACEMENT_GATE,
    PLACEMENT_LABEL,
    Pod,
    is_gated_by_us,
    is_leader,
    name_without_suffix,
    node_name,
    owner_uid,
    placed_by_leader,
)
from jobset_controller.controller.resources import NODES, PODS
from jobset_controller.reconcile.catalogue import (
    DISRUPTION_TARGET_CONDITION,
    EXCLUSIVE_PLACEMENT_VIOLATION_MESSAGE,
    EXCLUSIVE_PLACEMENT_VIOLATION_REASON,
    FOLLOWER_PLACED_EVENT,
    NORMAL,
    WARNING,
    follower_placed_message,
)
from jobset_controller.reconcile.pod_placement import Eviction, PodPlan, Release, plan_pods
from jobset_controller.runtime.client import Conflict, KubeClient, NotFound
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.events import EventRecorder, ObjectRef
from jobset_controller.runtime.informer import Handlers, Informer, Obj
from jobset_controller.runtime.workers import Result, split_key

log = structlog.get_logger("pod-controller")

JOB_UID = "job-uid"
JOBSET_PODS = "jobset-pods"
LEADER_NAME = "leader-name"
ON_NODE = "node"
POD_SELECTOR = JOB_KEY
_STRATEGIC = "application/strategic-merge-patch+json"
_KEPT_LABELS = (JOBSET_NAME_KEY, REPLICATED_JOB_NAME_KEY, JOB_INDEX_KEY, JOB_KEY, PLACEMENT_LABEL)
_KEPT_ANNOTATIONS = (
    JOBSET_NAME_KEY,
    EXCLUSIVE_KEY,
    NODE_SELECTOR_STRATEGY_KEY,
    COMPLETION_INDEX_ANNOTATION,
)


def _pick(mapping: Mapping[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: mapping[k] for k in keys if mapping and k in mapping}


def trim_pod(pod: Obj) -> Obj:
    """Only what placement reads (module docstring); a pod not placed by leader and followers
    becomes a stub without annotations, which `keep_pod` drops."""
    meta = pod.get("metadata") or {}
    if not placed_by_leader(pod):
        return {"metadata": _pick(meta, ("name", "namespace", "uid", "resourceVersion"))}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    owners = [
        {"uid": ref.get("uid"), "controller": True}
        for ref in meta.get("ownerReferences") or ()
        if ref.get("controller")
    ]
    trimmed_meta: dict[str, Any] = {
        **_pick(meta, ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")),
        "labels": _pick(meta.get("labels"), _KEPT_LABELS),
        "annotations": _pick(annotations, _KEPT_ANNOTATIONS),
        "ownerReferences": owners,
    }
    topology = annotations.get(EXCLUSIVE_KEY)
    selector = spec.get("nodeSelector") or {}
    trimmed_spec: dict[str, Any] = _pick(spec, ("nodeName", "schedulingGates"))
    if topology in selector:
        trimmed_spec["nodeSelector"] = {topology: selector[topology]}
    conditions = [
        c for c in status.get("conditions") or () if c.get("type") == DISRUPTION_TARGET_CONDITION
    ]
    trimmed_status: dict[str, Any] = _pick(status, ("phase",))
    if conditions:
        trimmed_status["conditions"] = conditions
    return {"metadata": trimmed_meta, "spec": trimmed_spec, "status": trimmed_status}


def keep_pod(pod: Obj) -> bool:
    """A trimmed pod is cached only if it is placed by leader and followers (`trim_pod`), or,
    with the InPlaceRestart gate, a JobSet pod (`trim_in_place` keeps its jobset-name label)."""
    meta = pod.get("metadata") or {}
    return EXCLUSIVE_KEY in (meta.get("annotations") or {}) or JOBSET_NAME_KEY in (
        meta.get("labels") or {}
    )


def _max_restart_count(status: Mapping[str, Any]) -> int:
    counts = [
        container.get("restartCount") or 0
        for key in ("initContainerStatuses", "containerStatuses")
        for container in status.get(key) or ()
    ]
    return max((c for c in counts if isinstance(c, int)), default=0)


def trim_in_place(pod: Obj) -> Obj:
    """`trim_pod`, plus what the in-place pass reads of every JobSet pod (module docstring):
    the attempt annotation, the phase and the largest restartCount (as one container status)."""
    trimmed = trim_pod(pod)
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if JOBSET_NAME_KEY not in labels:
        return trimmed
    status = pod.get("status") or {}
    out_meta = trimmed["metadata"]
    out_meta.setdefault("labels", {})[JOBSET_NAME_KEY] = labels[JOBSET_NAME_KEY]
    attempt = (meta.get("annotations") or {}).get(IN_PLACE_RESTART_ATTEMPT_KEY)
    if attempt is not None:
        out_meta.setdefault("annotations", {})[IN_PLACE_RESTART_ATTEMPT_KEY] = attempt
    out_status = trimmed.setdefault("status", {})
    if "phase" in status:
        out_status["phase"] = status["phase"]
    restarts = _max_restart_count(status)
    if restarts:
        out_status["containerStatuses"] = [{"restartCount": restarts}]
    return trimmed


def in_place_facts(pod: Obj) -> tuple[object, ...]:
    """What the in-place pass reads of a trimmed pod: a change of it wakes the JobSet."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return (
        (meta.get("annotations") or {}).get(IN_PLACE_RESTART_ATTEMPT_KEY),
        status.get("phase"),
        _max_restart_count(status),
    )


def jobset_of(pod: Obj) -> str | None:
    """`<namespace>/<jobset name>` of a JobSet pod (its label), else None."""
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(JOBSET_NAME_KEY)
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if name and namespace else None


def _jobset_pods_index(pod: Obj) -> list[str]:
    key = jobset_of(pod)
    return [key] if key else []


def trim_node(node: Obj) -> Obj:
    meta = node.get("metadata") or {}
    return {"metadata": _pick(meta, ("name", "uid", "resourceVersion", "labels"))}


def _job_uid_index(pod: Obj) -> list[str]:
    uid = owner_uid(pod)
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [f"{namespace}/{uid}"] if uid and namespace else []


def _leader_name_index(pod: Obj) -> list[str]:
    if not is_leader(pod):
        return []
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [f"{namespace}/{name_without_suffix(pod)}"]


def _on_node_index(pod: Obj) -> list[str]:
    node = node_name(pod)
    return [node] if node else []


def _pod_ref(namespace: str, name: str, uid: str) -> ObjectRef:
    return ObjectRef(api_version="v1", kind="Pod", name=name, namespace=namespace, uid=uid)


class PodPlacementController:
    """Owns the pod and node caches; reconciles `<namespace>/<Job uid>` keys."""

    def __init__(
        self,
        client: KubeClient,
        *,
        enqueue: Callable[[str], None],
        recorder: EventRecorder,
        clock: Clock | None = None,
        rng: RandomSource = random,
        in_place_restart: bool = False,
    ) -> None:
        """`in_place_restart`: the InPlaceRestart gate (module docstring)."""
        self._client = client
        self._recorder = recorder
        self._enqueue = enqueue
        # Set by the manager to the JobSet controller's `pod_changed` (gate on only).
        self.on_jobset_pod: Callable[[str], None] | None = None

        def wake(pod: Obj) -> None:
            for key in _job_uid_index(pod):
                enqueue(key)

        def wake_jobset(old: Obj | None, new: Obj | None) -> None:
            notify = self.on_jobset_pod
            if notify is None:
                return
            if old is not None and new is not None and in_place_facts(old) == in_place_facts(new):
                return
            key = jobset_of(new if new is not None else old or {})
            if key is not None:
                notify(key)

        def on_add(pod: Obj) -> None:
            wake(pod)
            wake_jobset(None, pod)

        def on_update(old: Obj, new: Obj) -> None:
            wake(new)
            wake_jobset(old, new)

        def on_delete(pod: Obj) -> None:
            wake(pod)
            wake_jobset(pod, None)

        indexers = {
            JOB_UID: _job_uid_index,
            LEADER_NAME: _leader_name_index,
            ON_NODE: _on_node_index,
        }
        if in_place_restart:
            indexers[JOBSET_PODS] = _jobset_pods_index
        self.pods = Informer(
            client,
            PODS,
            label_selector=POD_SELECTOR,
            transform=trim_in_place if in_place_restart else trim_pod,
            keep=keep_pod,
            indexers=indexers,
            handlers=Handlers(on_add=on_add, on_update=on_update, on_delete=on_delete),
            clock=clock,
            rng=rng,
        )
        self.nodes = Informer(
            client,
            NODES,
            transform=trim_node,
            handlers=Handlers(
                on_update=self._node_changed, on_delete=lambda node: self._wake_node(node)
            ),
            clock=clock,
            rng=rng,
        )

    @property
    def informers(self) -> tuple[Informer, ...]:
        return (self.pods, self.nodes)

    # ------------------------------------------------------------------ lookups (webhooks too)
    def leaders(self, namespace: str, name: str) -> list[Pod]:
        return list(self.pods.store.by_index(LEADER_NAME, f"{namespace}/{name}"))

    def node_labels(self, name: str) -> Mapping[str, str] | None:
        node = self.nodes.store.get(name)
        if node is None:
            return None
        labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
        return labels

    def _node_changed(self, old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
            self._wake_node(new)

    def _wake_node(self, node: Obj) -> None:
        """Jobs whose leader is bound to this node look at their domain again."""
        name = str((node.get("metadata") or {}).get("name") or "")
        for pod in self.pods.store.by_index(ON_NODE, name):
            if is_leader(pod):
                for key in _job_uid_index(pod):
                    self._enqueue(key)

    async def log_waiting_followers(self) -> None:
        """After the workers stop (a leader's shutdown): the followers still behind our gate,
        waiting for a leader that is not bound. A successor of this controller releases them;
        upstream's controller does not know the gate, so the line names the command that does."""
        waiting = waiting_followers(self.pods)
        if waiting:
            log.warning(
                "followers still wait behind the exclusive-placement gate; if upstream's "
                "controller takes over, run: jobset-controller release-followers "
                "--all-namespaces --wait",
                count=len(waiting),
                pods=waiting[:20],
            )

    # ------------------------------------------------------------------ reconcile
    async def reconcile(self, key: str) -> Result | None:
        namespace, _ = split_key(key)
        pods = self.pods.store.by_index(JOB_UID, key)
        if not pods:
            return None
        plan = plan_pods(pods, self.node_labels)
        await self._execute(namespace, pods, plan)
        if plan.requeue_after is not None:
            return Result(requeue_after=plan.requeue_after)
        return None

    async def _execute(self, namespace: str, pods: list[Obj], plan: PodPlan) -> None:
        uids = {str(p["metadata"].get("name")): str(p["metadata"].get("uid", "")) for p in pods}
        for warning in plan.warnings:
            log.warning(
                "followers wait: leader's domain unreadable",
                namespace=namespace,
                pod=warning.pod,
                reason=warning.reason,
            )
            self._recorder.record(
                _pod_ref(namespace, warning.pod, warning.uid),
                WARNING,
                warning.reason,
                warning.message,
            )
        # A Job's followers are released and evicted in parallel: each is one independent write.
        await asyncio.gather(
            *(self._release(namespace, r, uids.get(r.pod, "")) for r in plan.releases),
            *(self._evict(namespace, e) for e in plan.evictions),
        )

    async def _release(self, namespace: str, release: Release, uid: str) -> None:
        # A strategic merge patch deletes our gate by its merge key and leaves every other gate
        # as it is at the server (Kueue may add or remove its own at the same moment), so no
        # resourceVersion precondition is needed and a status write by the scheduler cannot make
        # it conflict. The API server refuses the nodeSelector addition if the pod is no longer
        # gated (a gate removed by hand meanwhile): the next pass evicts that pod instead.
        try:
            await release_follower(self._client, namespace, release)
        except NotFound:
            return
        log.info("follower released", namespace=namespace, pod=release.pod, domain=release.domain)
        self._recorder.record(
            _pod_ref(namespace, release.pod, uid),
            NORMAL,
            FOLLOWER_PLACED_EVENT,
            follower_placed_message(release.selector_key, release.domain),
        )

    async def _evict(self, namespace: str, eviction: Eviction) -> None:
        path = PODS.path(namespace, eviction.pod)
        log.info("evicting misplaced follower", namespace=namespace, pod=eviction.pod)
        try:
            if not eviction.condition_present:
                condition = {
                    "type": DISRUPTION_TARGET_CONDITION,
                    "status": "True",
                    "reason": EXCLUSIVE_PLACEMENT_VIOLATION_REASON,
                    "message": EXCLUSIVE_PLACEMENT_VIOLATION_MESSAGE,
                    "lastTransitionTime": _now_rfc3339(),
                }
                await self._client.request(
                    "PATCH",
                    path + "/status",
                    body={"status": {"conditions": [condition]}},
                    content_type=_STRATEGIC,
                )
            await self._client.delete(path, propagation="Background", uid=eviction.uid or None)
            self._recorder.record(
                _pod_ref(namespace, eviction.pod, eviction.uid),
                WARNING,
                EXCLUSIVE_PLACEMENT_VIOLATION_REASON,
                EXCLUSIVE_PLACEMENT_VIOLATION_MESSAGE,
            )
        except NotFound:
            return
        except Conflict:
            return  # the uid precondition failed: this pod is gone, a successor is judged anew


async def release_follower(client: KubeClient, namespace: str, release: Release) -> None:
    """The one patch that places a gated follower: the leader's domain as its nodeSelector and
    our gate removed (a strategic merge patch deleting only our gate; see `_release`). Also what
    `jobset-controller release-followers` sends when this controller is not running."""
    patch = {
        "spec": {
            "nodeSelector": {release.selector_key: release.domain},
            "schedulingGates": [{"name": PLACEMENT_GATE, "$patch": "delete"}],
        },
    }
    await client.request(
        "PATCH", PODS.path(namespace, release.pod), body=patch, content_type=_STRATEGIC
    )


def waiting_followers(pods: Informer) -> list[str]:
    """`<namespace>/<name>` of every cached follower still behind our gate."""
    return sorted(
        f"{(pod.get('metadata') or {}).get('namespace')}/{(pod.get('metadata') or {}).get('name')}"
        for pod in pods.store
        if is_gated_by_us(pod)
    )


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
