"""The informer's list/watch loop, following client-go's reflector, against an in-memory client:
which resourceVersion each request uses, when it relists, and when it backs off. Time is virtual
(FakeClock): a watch that "lasts" and the backoff waits pass without real sleeping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from jobset_controller.runtime.client import Gone, Invalid
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.informer import Handlers, Informer
from jobset_controller.runtime.resources import Resource

CONFIGMAPS = Resource("", "v1", "configmaps")


def cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class ScriptedClient:
    """Answers lists and watches from scripts and records (verb, resourceVersion)."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[tuple[str, str]] = []
        self.idle = asyncio.Event()
        self.clock = FakeClock()

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls.append(("list", params["resourceVersion"]))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    async def watch(
        self, path: str, *, params: dict[str, Any], read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        streaming = params.get("sendInitialEvents") is True
        self.calls.append(("stream" if streaming else "watch", params["resourceVersion"]))
        assert params["allowWatchBookmarks"] is True
        assert 300 <= params["timeoutSeconds"] <= 600
        if streaming:
            assert params["resourceVersionMatch"] == "NotOlderThan"
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()  # no more script: hang like a quiet watch
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            if callable(event):
                event()  # a check at this point of the stream
                continue
            yield event
        # A normal watch lasts (virtual time); under 1 s without events is "very short".
        await self.clock.sleep(1.1)


async def run_until_idle(client: ScriptedClient, **options: Any) -> Informer:
    informer = Informer(
        client,  # type: ignore[arg-type]
        CONFIGMAPS,
        backoff_initial=0.01,
        clock=client.clock,
        **options,
    )
    await drive_until_idle(client, informer)
    return informer


async def drive_until_idle(client: ScriptedClient, informer: Informer) -> None:
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(120):  # up to a virtual minute: the scripts need a few seconds at most
            if client.idle.is_set():
                break
            await client.clock.advance(0.5)
        else:
            raise AssertionError("the informer did not reach the end of its script")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def listing(rv: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "items": list(items)}


async def test_a_clean_end_of_stream_rewatches_from_the_last_version_without_relisting() -> None:
    client = ScriptedClient(
        lists=[listing("5", cm("a", "5"))],
        watches=[[{"type": "MODIFIED", "object": cm("a", "6")}]],
    )
    informer = await run_until_idle(client)
    assert client.calls == [("list", ""), ("watch", "5"), ("watch", "6")]
    assert informer.stats.errors == 0


async def test_an_idle_watch_that_times_out_rewatches_at_once_without_error_or_relist() -> None:
    client = ScriptedClient(lists=[listing("5", cm("a", "5"))], watches=[TimeoutError()])
    informer = await run_until_idle(client)
    assert client.calls == [("list", ""), ("watch", "5"), ("watch", "5")]
    assert informer.stats.errors == 0
    assert informer.stats.idle_rewatches == 1
    assert list(informer.stats.backoff_delays) == []


EXPIRED = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}


def initial_events_end(rv: str) -> dict[str, Any]:
    """The bookmark that ends a streaming list's initial events."""
    annotations = {"k8s.io/initial-events-end": "true"}
    return {
        "type": "BOOKMARK",
        "object": {"metadata": {"resourceVersion": rv, "annotations": annotations}},
    }


async def test_an_expired_watch_relists_by_a_streaming_list_from_the_last_version() -> None:
    streamed = [{"type": "ADDED", "object": cm("b", "8")}, initial_events_end("9")]
    client = ScriptedClient(lists=[listing("5", cm("a", "5"))], watches=[[EXPIRED], streamed])
    informer = await run_until_idle(client)
    assert client.calls == [("list", ""), ("watch", "5"), ("stream", "5"), ("watch", "9")]
    assert informer.stats.relists_after_expiry == 1
    assert informer.stats.streamed_relists == 1
    assert len(informer.stats.backoff_delays) == 1  # after a backoff, like client-go
    assert [o["metadata"]["name"] for o in informer.store] == ["b"]


async def test_a_streaming_relist_changes_the_store_in_one_step_at_its_bookmark() -> None:
    events: list[tuple[str, str]] = []
    handlers = Handlers(
        on_add=lambda o: events.append(("add", o["metadata"]["name"])),
        on_update=lambda old, new: events.append(("update", new["metadata"]["name"])),
        on_delete=lambda o: events.append(("delete", o["metadata"]["name"])),
    )
    informers: list[Informer] = []
    before_bookmark: list[Any] = []

    def look() -> None:  # an assert here would only be logged by the informer's loop
        names = sorted(o["metadata"]["name"] for o in informers[0].store)
        before_bookmark.append((names, list(events)))

    streamed = [
        {"type": "ADDED", "object": cm("a", "7")},
        {"type": "ADDED", "object": cm("new", "8")},
        look,
        initial_events_end("9"),
    ]
    client = ScriptedClient(
        lists=[listing("5", cm("a", "5"), cm("gone", "4"))], watches=[[EXPIRED], streamed]
    )
    informer = Informer(
        client,  # type: ignore[arg-type]
        CONFIGMAPS,
        handlers=handlers,
        backoff_initial=0.01,
        clock=client.clock,
    )
    informers.append(informer)
    await drive_until_idle(client, informer)
    assert before_bookmark == [(["a", "gone"], [("add", "a"), ("add", "gone")])]
    assert sorted(events[2:]) == [("add", "new"), ("delete", "gone"), ("update", "a")]
    assert sorted(o["metadata"]["name"] for o in informer.store) == ["a", "new"]
    assert informer.resource_version == "9"


async def test_a_server_refusing_streaming_lists_gets_plain_relists_from_then_on() -> None:
    refused = Invalid(422, {"message": "sendInitialEvents is forbidden"})
    client = ScriptedClient(
        lists=[listing("5"), listing("9"), listing("12")],
        watches=[[EXPIRED], refused, [EXPIRED]],
    )
    informer = await run_until_idle(client)
    assert client.calls == [
        ("list", ""),
        ("watch", "5"),
        ("stream", "5"),
        ("list", "5"),
        ("watch", "9"),
        ("list", "9"),
        ("watch", "12"),
    ]
    assert informer.stats.streamed_relists == 0
    assert informer.stats.errors == 0


async def test_a_streaming_relist_cut_before_its_bookmark_backs_off_and_streams_again() -> None:
    cut = [{"type": "ADDED", "object": cm("b", "8")}]
    streamed = [{"type": "ADDED", "object": cm("b", "8")}, initial_events_end("9")]
    client = ScriptedClient(lists=[listing("5", cm("a", "5"))], watches=[[EXPIRED], cut, streamed])
    informer = await run_until_idle(client)
    assert client.calls == [
        ("list", ""),
        ("watch", "5"),
        ("stream", "5"),
        ("stream", "5"),
        ("watch", "9"),
    ]
    assert informer.stats.errors == 1
    assert [o["metadata"]["name"] for o in informer.store] == ["b"]


async def test_a_relist_whose_version_is_gone_falls_back_to_a_consistent_read() -> None:
    client = ScriptedClient(
        lists=[listing("5"), Gone(410, {"reason": "Expired"}), listing("12")],
        watches=[[EXPIRED], [EXPIRED]],
    )
    await run_until_idle(client)
    assert client.calls == [
        ("list", ""),
        ("watch", "5"),
        ("stream", "5"),  # expired as well: a list at once
        ("list", "5"),
        ("list", ""),
        ("watch", "12"),
    ]


async def test_a_failing_watch_backs_off_and_resumes_without_relisting() -> None:
    client = ScriptedClient(
        lists=[listing("5")],
        watches=[ConnectionResetError("reset"), ConnectionResetError("reset")],
    )
    informer = await run_until_idle(client)
    assert client.calls == [("list", ""), ("watch", "5"), ("watch", "5"), ("watch", "5")]
    assert informer.stats.errors == 2
    first, second = informer.stats.backoff_delays
    assert 0.01 <= first < 0.02
    assert 0.02 <= second < 0.04  # doubling, each drawn from [d, 2d)


class PagedClient(ScriptedClient):
    """Records the paging parameters of each list as well."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        super().__init__(lists, watches)
        self.pages: list[tuple[str, Any, Any]] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.pages.append((params["resourceVersion"], params.get("limit"), params.get("continue")))
        return await super().get(path, **params)


async def test_the_first_list_is_read_in_pages_of_a_consistent_read() -> None:
    first = {"metadata": {"resourceVersion": "7", "continue": "t1"}, "items": [cm("a", "3")]}
    last = {"metadata": {"resourceVersion": "7"}, "items": [cm("b", "4")]}
    client = PagedClient(lists=[first, last], watches=[])
    informer = await run_until_idle(client)
    assert client.pages == [("", 500, None), ("", 500, "t1")]
    assert client.calls == [("list", ""), ("list", ""), ("watch", "7")]
    assert [o["metadata"]["name"] for o in informer.store] == ["a", "b"]


async def test_an_informer_of_large_objects_reads_its_first_list_in_smaller_pages() -> None:
    first = {"metadata": {"resourceVersion": "7", "continue": "t1"}, "items": [cm("a", "3")]}
    last = {"metadata": {"resourceVersion": "7"}, "items": [cm("b", "4")]}
    client = PagedClient(lists=[first, last], watches=[])
    informer = await run_until_idle(client, list_page=100)
    assert client.pages == [("", 100, None), ("", 100, "t1")]
    assert [o["metadata"]["name"] for o in informer.store] == ["a", "b"]


async def test_an_expired_continue_token_falls_back_to_one_list() -> None:
    first = {"metadata": {"resourceVersion": "7", "continue": "t1"}, "items": [cm("a", "3")]}
    client = PagedClient(
        lists=[first, Gone(410, {"reason": "Expired"}), listing("9", cm("b", "9"))], watches=[]
    )
    informer = await run_until_idle(client)
    assert client.pages == [("", 500, None), ("", 500, "t1"), ("0", None, None)]
    assert client.calls[-1] == ("watch", "9")
    assert [o["metadata"]["name"] for o in informer.store] == ["b"]
