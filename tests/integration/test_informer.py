"""The informer against a real apiserver: events, apiserver restarts, etcd compaction."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobset_controller.runtime.client import KubeClient
from jobset_controller.runtime.informer import Handlers, Informer
from jobset_controller.runtime.resources import Resource
from jobset_controller_dev.envtest import ControlPlane
from jobset_controller_dev.envtest.polling import eventually

CONFIGMAPS = Resource("", "v1", "configmaps")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def handlers(self) -> Handlers:
        return Handlers(
            on_add=lambda o: self.events.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: self.events.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: self.events.append(("delete", o["metadata"]["name"])),
        )


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def configmap(name: str, value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"value": value}}


def names(informer: Informer) -> set[str]:
    return {obj["metadata"]["name"] for obj in informer.store}


async def test_informer_sees_creates_updates_and_deletes(kube: KubeClient, namespace: str) -> None:
    recorder = Recorder()
    await kube.create(CONFIGMAPS.path(namespace), configmap("before"))
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, handlers=recorder.handlers())
    async with running(informer):
        await informer.wait_synced()
        assert names(informer) == {"before"}
        await kube.create(CONFIGMAPS.path(namespace), configmap("a"))
        await kube.merge_patch(CONFIGMAPS.path(namespace, "a"), {"data": {"value": "2"}})
        await kube.request("DELETE", CONFIGMAPS.path(namespace, "before"))
        await eventually(
            lambda: ("delete", "before") in recorder.events,
            "('delete', 'before') in recorder.events",
            20.0,
            interval=0.05,
        )
        await eventually(
            lambda: ("update", "a") in recorder.events,
            "('update', 'a') in recorder.events",
            20.0,
            interval=0.05,
        )
    assert recorder.events[0] == ("add", "before")
    assert ("add", "a") in recorder.events
    assert names(informer) == {"a"}
    stored = informer.store.get(f"{namespace}/a")
    assert stored is not None
    assert stored["data"] == {"value": "2"}
    assert "managedFields" not in stored["metadata"]
    assert [o["metadata"]["name"] for o in informer.store.by_index("namespace", namespace)] == ["a"]


async def test_informer_converges_after_apiserver_restart(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIGMAPS.path(namespace), configmap("old"))
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, read_timeout=10)
    async with running(informer):
        await informer.wait_synced()
        control_plane.restart_apiserver()
        await kube.create(CONFIGMAPS.path(namespace), configmap("new"))
        await kube.request("DELETE", CONFIGMAPS.path(namespace, "old"))
        await eventually(
            lambda: names(informer) == {"new"}, "names(informer) == {'new'}", 60, interval=0.05
        )
    assert informer.stats.lists >= 1
    assert informer.stats.errors + informer.stats.relists_after_expiry >= 1


async def test_informer_relists_after_compaction_and_delivers_the_missed_delete(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    recorder = Recorder()
    await kube.create(CONFIGMAPS.path(namespace), configmap("gone"))
    informer = Informer(kube, CONFIGMAPS, namespace=namespace, handlers=recorder.handlers())
    async with running(informer):
        await informer.wait_synced()
    stale_rv = informer.resource_version
    # While the informer is away: a delete and a create it never sees, then history is erased.
    await kube.request("DELETE", CONFIGMAPS.path(namespace, "gone"))
    await kube.create(CONFIGMAPS.path(namespace), configmap("fresh"))
    revision = int((await kube.get(CONFIGMAPS.path(namespace)))["metadata"]["resourceVersion"])
    control_plane.etcdctl("compact", str(revision))
    control_plane.restart_apiserver()  # the watch cache starts afresh
    async with running(informer):
        await eventually(
            lambda: names(informer) == {"fresh"}, "names(informer) == {'fresh'}", 60, interval=0.05
        )
    assert int(stale_rv) < revision
    assert informer.stats.relists_after_expiry >= 1
    assert informer.stats.streamed_relists >= 1  # Kubernetes 1.37 serves streaming lists
    assert ("delete", "gone") in recorder.events
    assert ("add", "fresh") in recorder.events


@pytest.mark.parametrize("size", [300_000])
async def test_informer_reads_objects_larger_than_aiohttp_line_limit(
    kube: KubeClient, namespace: str, size: int
) -> None:
    informer = Informer(kube, CONFIGMAPS, namespace=namespace)
    async with running(informer):
        await informer.wait_synced()
        await kube.create(CONFIGMAPS.path(namespace), configmap("big", "x" * size))
        await eventually(
            lambda: "big" in names(informer), "'big' in names(informer)", 20.0, interval=0.05
        )
    stored = informer.store.get(f"{namespace}/big")
    assert stored is not None
    assert len(stored["data"]["value"]) == size
