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
  status details) is dropped on arrival. What is kept is held compactly (the informer's
  `compact`: deflated JSON, parsed on each read, about 100 bytes a pod instead of 2.4 KB of
  dicts and strings; 0.7 KB a pod in all with its key and index entries against 3.0 KB, at
  10,000 placed pods): the cache grows with the cluster's training pods, which the largest
  clusters count in tens of thousands. A read costs about 5 us (a leader lookup per pod
  review, a Job's pods per placement pass).
- Nodes: name, labels and the dead-node taints (`trim_node`); a node's domain is what
  placement reads, the taints what the stuck-pod pass reads.

Every JobSet pod that has failed or is being deleted is kept too, trimmed to its end
(`api.pod_status.end_facts`: the failing container, the node, the deletion times, the JobSet's
name and uid labels, its Job's uid): the failed ones are indexed by `<namespace>/<jobset name>`
(`FAILED_PODS`) for the first failure a restart's message names (`Snapshot.failed_pods`), the
terminating ones are what the stuck-pod pass looks at. Such pods are few at any time (a restart
of a large JobSet holds its pods for a grace period); running pods that are not placed by
leader and followers are still dropped on arrival.

With the InPlaceRestart gate on, the same watch also keeps every pod that carries the jobset-name
label, trimmed to what the JobSet controller's in-place pass reads (`trim_in_place`: name, uid,
resourceVersion, the jobset-name label, the in-place attempt annotation, the phase and the
largest container `restartCount`), indexed by `<namespace>/<jobset name>` (`JOBSET_PODS`); each
change of those facts is handed to `on_jobset_pod` (the JobSet controller, which wakes the JobSet
if it uses the strategy). A pod placed by leader and followers keeps both sets of fields.

The key of the work queue is `<namespace>/<Job uid>`: every change of one of the Job's pods wakes
it, and so does a change of the labels of a node a leader is bound to, or of the dead-node
taints of a node one of its pods is terminating on. The pass reads the Job's pods from the
cache, asks the pure `plan_pods` and `plan_stuck_pods`, and carries the plans out: release
patches (a strategic merge patch that deletes only our gate, so other gates are never
overwritten), evictions (DisruptionTarget through the status subresource, then delete with the
pod's uid as precondition), Warning events on leaders whose domain cannot be read, and force
deletes of pods stuck terminating on a dead node (`unreachableNodePods`, on by default).

The same caches answer the pod webhooks' lookups (`lookups`): the leader by name without suffix,
a node's labels, and (for the opt-in follower narrowing) a domain's nodes by name
(`DomainNodes`).
"""

from __future__ import annotations

import asyncio
import datetime
import random
import sys
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from jobset_controller.api import (
    API_VERSION as JOBSET_API_VERSION,
)
from jobset_controller.api import (
    EXCLUSIVE_KEY,
    IN_PLACE_RESTART_ATTEMPT_KEY,
    JOB_INDEX_KEY,
    JOB_KEY,
    JOBSET_NAME_KEY,
    JOBSET_UID_KEY,
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
from jobset_controller.api.pod_status import is_failed, is_terminating, merge_end_facts
from jobset_controller.controller.domain_nodes import DomainNodes
from jobset_controller.controller.resources import NODES, PODS
from jobset_controller.reconcile.catalogue import (
    DELETION_BY_JOBSET_CONTROLLER_REASON,
    DISRUPTION_TARGET_CONDITION,
    EXCLUSIVE_PLACEMENT_VIOLATION_MESSAGE,
    EXCLUSIVE_PLACEMENT_VIOLATION_REASON,
    FOLLOWER_PLACED_EVENT,
    NORMAL,
    POD_FORCE_DELETED_EVENT,
    WARNING,
    follower_placed_message,
    pod_force_deleted_message,
)
from jobset_controller.reconcile.pod_placement import Eviction, PodPlan, Release, plan_pods
from jobset_controller.reconcile.stuck_pods import (
    DEAD_NODE_TAINTS,
    ForceDelete,
    dead_node_taints,
    plan_stuck_pods,
)
from jobset_controller.runtime.client import Conflict, KubeClient, NotFound
from jobset_controller.runtime.clock import Clock, RandomSource
from jobset_controller.runtime.events import EventRecorder, ObjectRef
from jobset_controller.runtime.informer import Handlers, Informer, Obj
from jobset_controller.runtime.workers import Result, split_key

log = structlog.get_logger("pod-controller")

JOB_UID = "job-uid"
JOBSET_PODS = "jobset-pods"
FAILED_PODS = "failed-pods"
LEADER_NAME = "leader-name"
ON_NODE = "node"
POD_SELECTOR = JOB_KEY
_STRATEGIC = "application/strategic-merge-patch+json"
# Objects per page of the first pod and node lists: a training pod is 5-20 KB of JSON and a node
# with its image list more, and what a page's parse leaves in the allocator grows with the page
# (runtime/informer.py: 12 MiB left by 10,000 pods in pages of 100, 32 in pages of 500).
LARGE_OBJECT_PAGE = 100
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
    """Only what placement reads, plus the end of a failed or terminating pod (module
    docstring); a running pod not placed by leader and followers becomes a stub without
    annotations, which `keep_pod` drops."""
    trimmed = _trim_for_placement(pod)
    if is_failed(pod) or is_terminating(pod):
        return merge_end_facts(trimmed, pod)
    return trimmed


def _trim_for_placement(pod: Obj) -> Obj:
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
    """A trimmed pod is cached only if it is placed by leader and followers (`trim_pod`), has
    failed or is being deleted, or, with the InPlaceRestart gate, is a JobSet pod
    (`trim_in_place` keeps its jobset-name label)."""
    meta = pod.get("metadata") or {}
    return (
        EXCLUSIVE_KEY in (meta.get("annotations") or {})
        or is_failed(pod)
        or is_terminating(pod)
        or JOBSET_NAME_KEY in (meta.get("labels") or {})
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
        # One entry: the failing container kept by `trim_pod` (a pod's end) carries the count,
        # so both readers find what they read in it.
        kept = (out_status.get("containerStatuses") or [{}])[0]
        out_status["containerStatuses"] = [{**kept, "restartCount": restarts}]
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


def _failed_pods_index(pod: Obj) -> list[str]:
    key = jobset_of(pod) if is_failed(pod) else None
    return [key] if key else []


def trim_node(node: Obj) -> Obj:
    """Name, labels (placement's domain) and the dead-node taints (`reconcile.stuck_pods`)."""
    meta = node.get("metadata") or {}
    trimmed: Obj = {"metadata": _pick(meta, ("name", "uid", "resourceVersion"))}
    if "labels" in meta:
        # One copy of each label value (a domain's, a pool's), where the parser gives every
        # node its own: the cache holds thousands of nodes with the same few values.
        trimmed["metadata"]["labels"] = {
            k: sys.intern(v) if type(v) is str else v for k, v in (meta["labels"] or {}).items()
        }
    taints = [
        {"key": t.get("key"), "effect": t.get("effect")}
        for t in (node.get("spec") or {}).get("taints") or ()
        if isinstance(t, dict) and t.get("key") in DEAD_NODE_TAINTS
    ]
    if taints:
        trimmed["spec"] = {"taints": taints}
    return trimmed


def _taint_keys(node: Obj) -> tuple[str, ...]:
    return dead_node_taints((node.get("spec") or {}).get("taints") or ())


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
        force_delete: bool = True,
        force_delete_after: float | None = None,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        """`in_place_restart`: the InPlaceRestart gate (module docstring). `force_delete` and
        `force_delete_after`: the Configuration's `unreachableNodePods` (`stuck_pods`); `wall`
        the wall clock the pods' deletion times are compared with."""
        self._client = client
        self._recorder = recorder
        self._enqueue = enqueue
        self._force_delete = force_delete
        self._force_delete_after = force_delete_after
        self._wall = wall
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
            FAILED_PODS: _failed_pods_index,
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
            compact=True,
            list_page=LARGE_OBJECT_PAGE,
            handlers=Handlers(on_add=on_add, on_update=on_update, on_delete=on_delete),
            clock=clock,
            rng=rng,
        )
        self.domains = DomainNodes(lambda: self.nodes.store)
        self.nodes = Informer(
            client,
            NODES,
            transform=trim_node,
            list_page=LARGE_OBJECT_PAGE,
            handlers=Handlers(
                on_add=lambda node: self.domains.forget(),
                on_update=self._node_changed,
                on_delete=self._node_deleted,
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

    def node_taints(self, name: str) -> tuple[str, ...] | None:
        """The node's dead-node taint keys (`reconcile.stuck_pods`), None if it is not cached."""
        node = self.nodes.store.get(name)
        return None if node is None else _taint_keys(node)

    def failed_pods(self, namespace: str, jobset: str) -> tuple[Pod, ...]:
        """The JobSet's failed pods, as kept (`api.pod_status.end_facts`)."""
        return tuple(self.pods.store.by_index(FAILED_PODS, f"{namespace}/{jobset}"))

    def domain_nodes(self, key: str, value: str) -> tuple[str, ...]:
        """The cached nodes of one topology domain, by name (`DomainNodes`)."""
        return self.domains.names(key, value)

    def _node_changed(self, old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
            self.domains.forget()
            self._wake_node(new)
        elif _taint_keys(old) != _taint_keys(new):
            self._wake_node(new, leaders=False)

    def _node_deleted(self, node: Obj) -> None:
        self.domains.forget()
        self._wake_node(node)

    def _wake_node(self, node: Obj, *, leaders: bool = True) -> None:
        """Jobs whose leader is bound to this node look at their domain again, and Jobs with a
        pod terminating on it at their stuck pods."""
        name = str((node.get("metadata") or {}).get("name") or "")
        for pod in self.pods.store.by_index(ON_NODE, name):
            if (leaders and is_leader(pod)) or is_terminating(pod):
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
        requeues = [plan.requeue_after]
        if self._force_delete:
            stuck = plan_stuck_pods(
                pods, self.node_taints, self._wall(), after=self._force_delete_after
            )
            by_name = {str(p["metadata"].get("name")): p for p in pods}
            await asyncio.gather(
                *(self._force(namespace, d, by_name.get(d.pod, {})) for d in stuck.deletes)
            )
            requeues.append(stuck.requeue_after)
        waits = [wait for wait in requeues if wait is not None]
        return Result(requeue_after=min(waits)) if waits else None

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

    async def _force(self, namespace: str, delete: ForceDelete, pod: Pod) -> None:
        """Force-delete a pod stuck on a dead node as the pod garbage collector does: Failed with
        DisruptionTarget first (unless already terminal), then grace period 0, UID
        precondition; one Warning event about its JobSet (`stuck_pods`)."""
        path = PODS.path(namespace, delete.pod)
        message = pod_force_deleted_message(
            delete.pod, delete.node, delete.taint, delete.terminating_since
        )
        log.warning(
            "force-deleting a pod stuck on a dead node",
            namespace=namespace,
            pod=delete.pod,
            node=delete.node,
            taint=delete.taint,
        )
        try:
            if not delete.terminal:
                condition = {
                    "type": DISRUPTION_TARGET_CONDITION,
                    "status": "True",
                    "reason": DELETION_BY_JOBSET_CONTROLLER_REASON,
                    "message": message,
                    "lastTransitionTime": _now_rfc3339(),
                }
                await self._client.request(
                    "PATCH",
                    path + "/status",
                    body={"status": {"phase": "Failed", "conditions": [condition]}},
                    content_type=_STRATEGIC,
                )
            await self._client.delete(
                path, propagation="Background", uid=delete.uid or None, grace_period_seconds=0
            )
        except NotFound:
            return
        except Conflict:
            return  # the uid precondition failed: this pod is gone, a successor is judged anew
        self._recorder.record(
            _regarding_jobset(namespace, pod), WARNING, POD_FORCE_DELETED_EVENT, message
        )


def _regarding_jobset(namespace: str, pod: Pod) -> ObjectRef:
    """The pod's JobSet (its name and uid labels), or the pod itself without them."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    name, uid = labels.get(JOBSET_NAME_KEY), labels.get(JOBSET_UID_KEY)
    if name and uid:
        return ObjectRef(
            api_version=JOBSET_API_VERSION, kind="JobSet", name=name, namespace=namespace, uid=uid
        )
    meta = pod.get("metadata") or {}
    return _pod_ref(namespace, str(meta.get("name") or ""), str(meta.get("uid") or ""))


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
