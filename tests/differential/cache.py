"""What a differential test reads from one cluster: watch-fed caches, not polling.

Every scenario of a side runs at once, each waiting on conditions over what the cluster holds;
polling every scenario's objects separately would cost a TLS connection per read on a machine
whose two cores also run two control planes and two controllers. Instead one thread per resource
lists it once and then watches it (all namespaces), keeping the current objects in memory; every
change wakes the waiters (`Cache.wait`).

The Job watch also records the order in which Jobs were ADDED (the API server delivers watch
events in etcd revision order, which is creation order) and when each ADDED arrived, so the
creation order of two controllers can be compared. A watch that breaks is resumed from its last
resourceVersion; one that expired (410) lists again, and Jobs first seen in that list are
appended by creationTimestamp (their exact order is lost, which the test reports as it is).
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.polling import scaled

T = TypeVar("T")

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
JOBS = "/apis/batch/v1/jobs"
PODS = "/api/v1/pods"
SERVICES = "/api/v1/services"
CLAIMS = "/api/v1/persistentvolumeclaims"
EVENTS = "/api/v1/events"

# resource -> (list path, field selector). Events: only those about JobSets.
WATCHED: dict[str, tuple[str, str]] = {
    "jobsets": (JOBSETS, ""),
    "jobs": (JOBS, ""),
    "pods": (PODS, ""),
    "services": (SERVICES, ""),
    "pvcs": (CLAIMS, ""),
    "events": (EVENTS, "involvedObject.kind=JobSet"),
}

Key = tuple[str, str]  # namespace, name


@dataclass(frozen=True)
class Added:
    """One Job as it was first seen: its namespace, name, labels, and when (monotonic s)."""

    namespace: str
    name: str
    labels: dict[str, str]
    seen: float


class Cache:
    """The watched objects of one cluster, by resource and (namespace, name)."""

    def __init__(self, cluster: FullCluster) -> None:
        self.cluster = cluster
        self.port = int(cluster.server.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(cluster.ca.pair.cert))
        context.load_cert_chain(str(cluster.admin.cert), str(cluster.admin.key))
        self.context = context
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {r: {} for r in WATCHED}
        self.added: list[Added] = []
        # When anything in a namespace last changed (monotonic s): "settled" needs quiet.
        self.changed_at: dict[str, float] = {}
        self.condition = threading.Condition()
        self.stopping = False
        self.errors: list[str] = []
        self.connections: set[http.client.HTTPSConnection] = set()
        self.threads = [
            threading.Thread(target=self._run, args=(resource,), daemon=True, name=resource)
            for resource in WATCHED
        ]
        self.synced: set[str] = set()
        for thread in self.threads:
            thread.start()

    # ------------------------------------------------------------------------------ reading
    def wait(self, check: Callable[[], T | None], what: str, timeout: float) -> T:
        """Until `check()` (called under the lock, on every change) returns something truthy;
        returns it. TimeoutError after `timeout` s (scaled here: `polling.scaled`)."""
        deadline = time.monotonic() + scaled(timeout)
        with self.condition:
            while True:
                if self.stopping:
                    raise RuntimeError(f"{what}: the cluster is stopping")
                result = check()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what}: not reached within {scaled(timeout):g} s")
                # Woken by every change; the timeout also lets quiet-period checks advance.
                self.condition.wait(min(left, 0.5))

    def items(self, resource: str, namespace: str) -> list[dict[str, Any]]:
        """The objects of `resource` in `namespace` (the lock is reentrant: checks call it)."""
        with self.condition:
            return [o for (ns, _), o in self.objects[resource].items() if ns == namespace]

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.condition:
            return self.objects[resource].get((namespace, name))

    def quiet_for(self, namespace: str) -> float:
        """Seconds since anything in `namespace` last changed."""
        return time.monotonic() - self.changed_at.get(namespace, 0.0)

    def wait_synced(self, timeout: float = 60) -> None:
        """Until every watch has listed (`wait`, which scales `timeout`)."""
        self.wait(lambda: self.synced == set(WATCHED), "every watch listed", timeout)

    # ------------------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        with self.condition:
            self.stopping = True
            connections = list(self.connections)
        for conn in connections:
            with suppress(OSError):
                if conn.sock is not None:
                    conn.sock.shutdown(2)
        for thread in self.threads:
            thread.join(timeout=scaled(5))

    # ------------------------------------------------------------------------------ watching
    def _connect(self) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context, timeout=scaled(60)
        )
        with self.condition:
            self.connections.add(conn)
        return conn

    def _get(self, path: str) -> dict[str, Any]:
        conn = self._connect()
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            response = conn.getresponse()
            body: dict[str, Any] = json.loads(response.read())
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status} {body.get('message')}")
            return body
        finally:
            conn.close()
            with self.condition:
                self.connections.discard(conn)

    def _run(self, resource: str) -> None:
        path, selector = WATCHED[resource]
        query = {"fieldSelector": selector} if selector else {}
        version = ""
        while not self.stopping:
            try:
                if not version:
                    listed = self._get(f"{path}?{urlencode(query)}" if query else path)
                    version = listed["metadata"]["resourceVersion"]
                    self._replace(resource, listed.get("items") or [])
                version = self._watch(resource, path, query, version)
            except Exception as error:  # the cluster stopping ends every watch this way
                if self.stopping:
                    return
                with self.condition:
                    self.errors.append(f"{resource}: {error!r}")
                time.sleep(0.2)  # back off before the next list or watch (not a test wait)

    def _watch(self, resource: str, path: str, query: dict[str, str], version: str) -> str:
        params = {
            **query, "watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
            "timeoutSeconds": "240",
        }  # fmt: skip
        conn = self._connect()
        try:
            conn.request("GET", f"{path}?{urlencode(params, quote_via=quote)}")
            response = conn.getresponse()
            if response.status != 200:
                response.read()
                return ""
            for line in _lines(response):
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    return "" if obj.get("code") == 410 else version
                version = obj["metadata"]["resourceVersion"]
                if kind != "BOOKMARK":
                    self._apply(resource, kind, obj)
            return version
        finally:
            conn.close()
            with self.condition:
                self.connections.discard(conn)

    def _replace(self, resource: str, items: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        with self.condition:
            store = self.objects[resource]
            fresh = {_key(o): o for o in items}
            for key in set(store) | set(fresh):
                self.changed_at[key[0]] = now
            if resource == "jobs":
                known = {(a.namespace, a.name) for a in self.added}
                for obj in sorted(items, key=lambda o: o["metadata"]["creationTimestamp"]):
                    if _key(obj) not in known:
                        self._record_added(obj, now)
            store.clear()
            store.update(fresh)
            self.synced.add(resource)
            self.condition.notify_all()

    def _apply(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        key = _key(obj)
        with self.condition:
            if kind == "DELETED":
                self.objects[resource].pop(key, None)
            else:
                if resource == "jobs" and key not in self.objects[resource] and kind == "ADDED":
                    self._record_added(obj, now)
                self.objects[resource][key] = obj
            self.changed_at[key[0]] = now
            self.condition.notify_all()

    def _record_added(self, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        self.added.append(
            Added(meta["namespace"], meta["name"], dict(meta.get("labels") or {}), now)
        )


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while True:
        line = response.readline()
        if not line:
            return
        if line.strip():
            yield line
