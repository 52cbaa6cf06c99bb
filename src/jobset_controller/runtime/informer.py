"""An informer: one resource's objects kept in memory by LIST then WATCH, with indexes.

Why our own: the official client's Watch and SharedInformer can stop or hang silently, relist
from etcd, skip bookmarks and spin without backoff (seen in kubernetes 36 and 37). This loop follows
client-go's reflector instead:

1. LIST (resourceVersion "0": served by the apiserver's cache; the first list of an empty store
   in pages, see below) and replace the store; objects that vanished since the last list are
   delivered as deletes with their last known state.
2. WATCH from the list's resourceVersion with bookmarks and a random server timeout in
   [300, 600] s, plus a client read timeout (longer than the ~60 s bookmark interval) so a
   half-open connection is noticed.
3. A clean end of stream re-watches from the last seen resourceVersion without relisting, and so
   does a read timeout: an idle resource type gets no bookmarks, and its silence is no failure.
4. 410 Gone / Expired (an ERROR event or an HTTP status) relists: a streaming list from the last
   resourceVersion (below), or, where the server refuses those, a list at the last
   resourceVersion, then with "" (a consistent read) if that is too old as well.
5. Other errors back off 0.8 s doubling to 30 s, each wait drawn from [d, 2d), reset after two
   healthy minutes; the watch resumes from the last resourceVersion (the cache is still valid).

Memory and the loop at scale (hack/bench/scale_bench.py): with `compact=True` the store keeps each
object as its JSON, deflated (level 1, primed with a preset dictionary: see `Store`), and parses it
again on every read. A parsed dict costs 4-6x its JSON (every dict, list and string is a Python
object), so 50,000 cached JobSets took hundreds of MiB; a trimmed child Job's JSON (2-3 KB, the
JobSet keys three times over) deflates to about 600 bytes alone, 200 with the dictionary. orjson's
own bytes would not do: they keep the capacity of the buffer they were written into (8 KB for those
3 KB). Compressing costs ~10-20 us per write and reading ~5-10 us per object, small beside the pass
that reads it. Reads return a fresh dict each time, so no caller can change the cache by mutating
what it got. The FIRST list (an empty store) is read in pages of `list_page` objects (a consistent
read, resourceVersion "", with `limit`/`continue`, as client-go's pager does): the single
resourceVersion "0" answer, which the server never pages, held every object of the cluster parsed at
once, and that peak (4-10x the cache) stayed in the process's RSS for good; it also stalled the loop
for its whole length. A page's parsed objects are freed once transformed, but the long-lived entries
made meanwhile sit among them in the allocator's arenas, so part of each page's peak stays too:
listing 10,000 training pods (7 KB each) into the compact pod cache left 32 MiB of RSS behind with
pages of 500 (client-go's size, our default) and 11 with pages of 100, for 7 MiB of cache, in 4.3
and 3.3 s (hack/bench/pod_list_bench.py). Informers of large objects (pods, nodes) take smaller
pages. A continue token that expires falls back to the single list. Items are transformed and
inserted in slices of `_LIST_SLICE` with a loop turn between slices. A relist of a synced store
(after 410 Gone) is a streaming list when the server allows it: a watch with `sendInitialEvents`
from the last resourceVersion ("not older than"), whose synthetic ADDED events are transformed one
by one and collected until the bookmark annotated `k8s.io/initial-events-end`, then put in the store
in one step (a reconcile never sees a half-old, half-new cache). Its peak is the kept objects as
transformed, not the whole answer parsed at once: relisting those 10,000 pods peaked 25 MiB over the
process's RSS streamed and 850 MiB as one list (the same bench). Why not pages: a list at a
resourceVersion with `limit` is an exact read that the watch cache may not serve and etcd does
(client-go turns paging off for relists for that reason); a relist from "" in pages would be a
consistent read of etcd each time. A server that refuses streaming lists (the WatchList feature off,
as in Kubernetes 1.33's defaults; a 400 or 422 answer) gets the unpaged list from then on.

Objects are raw dicts (orjson-parsed), passed through a `transform` on the way in (strip
managedFields, keep only what the controller reads) and an optional `keep` predicate (objects it
rejects are not cached at all; one that stops matching is delivered as a delete). The store is
mutated only on the event loop, so it needs no lock. Handlers are plain callbacks that must not
block (they enqueue keys). Backoff waits, the short-watch check and the resync period are measured
on the injected Clock, and the jitter drawn from the injected RandomSource, so tests can step them.
"""

from __future__ import annotations

import asyncio
import random
import sys
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from jobset_controller.runtime.client import ApiError, Gone, KubeClient, ServerError
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.resources import Resource

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]
Keep = Callable[[Obj], bool]
IndexFunc = Callable[[Obj], Iterable[str]]

log = structlog.get_logger("informer")

_BACKOFF_INITIAL = 0.8
_BACKOFF_MAX = 30.0
_BACKOFF_RESET = 120.0
# Items of a list handled between two turns of the event loop (about 10-30 ms of work).
_LIST_SLICE = 500
# Objects per page of the first list unless the informer is given `list_page` (client-go's
# pager: 500).
_LIST_PAGE = 500
# The annotation of the bookmark that ends a streaming list's initial events (KEP-3157).
_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# zlib's wbits for raw deflate: no header or checksum (the bytes never leave the process).
_RAW_DEFLATE = -15
# zlib's memLevel for the compressor of each stored object. The default (8) sets up ~256 KiB of
# state per compressor, and one is made per write: ~58 us per cached JobSet or Job on the
# development machine, against ~11 us at 6, for output 0.3% larger (objects of a few KB never
# fill the bigger hash table). Every ADDED and MODIFIED event of a compact store pays it.
_MEM_LEVEL = 6


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's key format)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def strip_managed_fields(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def index_by_namespace(obj: Obj) -> list[str]:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return [namespace] if namespace else []


def controller_owner(obj: Mapping[str, Any], *, api_version: str, kind: str) -> dict[str, Any]:
    """The controller ownerReference of the given apiVersion/kind, or {} if there is none."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and (ref.get("apiVersion"), ref.get("kind")) == (
            api_version,
            kind,
        ):
            return dict(ref)
    return {}


class Store:
    """Objects by key plus secondary indexes (index name -> value -> keys).

    `compact`: keep each object as compressed JSON and parse it on every read (module
    docstring); reads then return a fresh dict each time. The compression is raw deflate primed
    with a preset dictionary: the JSON of the first object the store was given. Objects of one
    kind from one controller share most of their text (field names, labels, image, owner), so
    a JobSet that deflates to ~520 bytes alone takes ~70 with it, a child Job ~200 instead of
    ~620 (hack/bench/informer_bench.py: 0.6 -> 0.3 KiB retained per cached Job); compressing and
    reading cost about the same as without. The
    dictionary is fixed for the store's life (every stored object needs it to be read back).

    An index value held by one key (a JobSet's one Service, a suspended JobSet's one Job) is
    kept as that key, not as a one-element set (a set costs ~200 bytes); values are interned,
    so the JobSet UID indexing its Jobs and its Service is one string.
    """

    def __init__(
        self, indexers: Mapping[str, IndexFunc] | None = None, *, compact: bool = False
    ) -> None:
        self._items: dict[str, Any] = {}
        self._compact = compact
        self._zdict: bytes | None = None
        self._indexers = dict(indexers or {})
        self._indexes: dict[str, dict[str, str | set[str]]] = {name: {} for name in self._indexers}

    def _read(self, stored: Any) -> Obj:
        if self._compact:
            reader = zlib.decompressobj(_RAW_DEFLATE, zdict=self._zdict or b"")
            return orjson.loads(reader.decompress(stored) + reader.flush())  # type: ignore[no-any-return]
        return stored  # type: ignore[no-any-return]

    def _encode(self, obj: Obj) -> Any:
        if not self._compact:
            return obj
        text = orjson.dumps(obj)
        if self._zdict is None:
            self._zdict = text
        writer = zlib.compressobj(1, zlib.DEFLATED, _RAW_DEFLATE, _MEM_LEVEL, zdict=self._zdict)
        return writer.compress(text) + writer.flush()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        """Whether an object is held under `key`, without reading it."""
        return key in self._items

    def __iter__(self) -> Iterator[Obj]:
        return iter([self._read(stored) for stored in list(self._items.values())])

    def list_keys(self) -> list[str]:
        return list(self._items)

    def get(self, key: str) -> Obj | None:
        stored = self._items.get(key)
        return None if stored is None else self._read(stored)

    def by_index(self, index: str, value: str) -> list[Obj]:
        """The objects the index names for `value`, by key. Safe to call from another thread
        while the loop's thread changes the store (the webhook server reads the pod and node
        caches from its own): an object removed between the index read and its own read is left
        out, as it is gone."""
        keys = self._indexes[index].get(value)
        if keys is None:
            return []
        names = [keys] if isinstance(keys, str) else sorted(keys)
        held = [self._items.get(k) for k in names]
        return [self._read(stored) for stored in held if stored is not None]

    def put(self, obj: Obj) -> Obj | None:
        """Insert or replace; returns the previous object."""
        key = object_key(obj)
        stored = self._items.get(key)
        old = None if stored is None else self._read(stored)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = self._encode(obj)
        for name, func in self._indexers.items():
            index = self._indexes[name]
            for value in func(obj):
                held = index.get(value)
                if held is None:
                    index[sys.intern(value)] = key
                elif isinstance(held, str):
                    if held != key:
                        index[value] = {held, key}
                else:
                    held.add(key)
        return old

    def remove(self, key: str) -> Obj | None:
        stored = self._items.pop(key, None)
        if stored is None:
            return None
        old = self._read(stored)
        self._unindex(key, old)
        return old

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, func in self._indexers.items():
            index = self._indexes[name]
            for value in func(obj):
                held = index.get(value)
                if held is None:
                    continue
                if isinstance(held, str):
                    if held == key:
                        del index[value]
                    continue
                held.discard(key)
                if len(held) == 1:
                    index[value] = next(iter(held))
                elif not held:
                    del index[value]


@dataclass
class Handlers:
    """Callbacks run on the event loop for each change; they must be quick and not raise."""

    on_add: Callable[[Obj], None] = lambda obj: None
    on_update: Callable[[Obj, Obj], None] = lambda old, new: None
    on_delete: Callable[[Obj], None] = lambda obj: None


@dataclass
class InformerStats:
    lists: int = 0
    watches: int = 0
    relists_after_expiry: int = 0
    idle_rewatches: int = 0
    errors: int = 0
    streamed_relists: int = 0
    last_error: str = ""
    backoff_delays: deque[float] = field(default_factory=lambda: deque(maxlen=100))


class _Expired(Exception):
    pass


class Informer:
    """Keeps `store` in step with one resource (optionally one namespace, label selector and
    field selector; ``metadata.name=<name>`` watches one object, which RBAC can grant by name)."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = strip_managed_fields,
        keep: Keep | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        handlers: Handlers | None = None,
        compact: bool = False,
        list_page: int = _LIST_PAGE,
        read_timeout: float = 90.0,
        min_watch_timeout: int = 300,
        resync_period: float | None = None,
        backoff_initial: float = _BACKOFF_INITIAL,
        clock: Clock | None = None,
        rng: RandomSource = random,
    ) -> None:
        self._client = client
        self._clock: Clock = clock or RealClock()
        self._rng = rng
        self.resource = resource
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._transform = transform
        self._keep = keep
        self.store = Store({"namespace": index_by_namespace, **(indexers or {})}, compact=compact)
        self._list_page = list_page
        self.handlers = handlers or Handlers()
        self._read_timeout = read_timeout
        self._min_watch_timeout = min_watch_timeout
        self._resync_period = resync_period
        self._backoff_initial = backoff_initial
        self._synced = asyncio.Event()
        self.resource_version = ""
        # Cleared for good when the server refuses a streaming list (module docstring).
        self._stream_relists = True
        self.stats = InformerStats()

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def run(self) -> None:
        """List and watch until cancelled."""
        delay = self._backoff_initial
        last_trouble = self._clock.now()
        # A synced informer that is run again resumes watching from its resourceVersion: the
        # cache is still valid, exactly as after a broken watch.
        need_list = not self.has_synced()
        resync = asyncio.create_task(self._resync_loop()) if self._resync_period else None
        try:
            while True:
                try:
                    if need_list:
                        await self._list()
                        need_list = False
                    await self._watch()
                    continue  # clean end of stream: re-watch from the last resourceVersion
                except _Expired:
                    # Relist, after the backoff like client-go: a server that keeps answering
                    # 410 must not get a tight loop of full lists.
                    self.stats.relists_after_expiry += 1
                    need_list = True
                    log.info("watch expired, relisting", resource=self.resource.plural)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self.stats.errors += 1
                    self.stats.last_error = str(error)
                    log.warning(
                        "list/watch failed", resource=self.resource.plural, error=str(error)
                    )
                now = self._clock.now()
                if now - last_trouble > _BACKOFF_RESET:
                    delay = self._backoff_initial
                last_trouble = now
                wait = delay * (1 + self._rng.random())
                self.stats.backoff_delays.append(wait)
                await self._clock.sleep(wait)
                delay = min(delay * 2, _BACKOFF_MAX)
        finally:
            if resync is not None:
                resync.cancel()

    # ---------------------------------------------------------------------------- list
    def _path(self) -> str:
        return self.resource.path(self._namespace)

    async def _list(self) -> None:
        params: dict[str, Any] = {
            "labelSelector": self._label_selector,
            "fieldSelector": self._field_selector,
        }
        if not self.has_synced() and len(self.store) == 0:
            try:
                await self._list_in_pages(params)
                return
            except Gone:
                # The continue token expired (a very long first list): one response instead;
                # the store, partly filled, is then replaced in one step.
                log.info("paged list expired, listing at once", resource=self.resource.plural)
        elif self._stream_relists and await self._relist_streaming():
            return
        attempts = [self.resource_version or "0", ""]
        body: dict[str, Any] | None = None
        for rv in attempts:
            try:
                body = await self._client.get(self._path(), resourceVersion=rv, **params)
                break
            except Gone:
                continue
            except ServerError as error:
                if error.status == 504 and "Too large resource version" in error.message:
                    continue
                raise
        if body is None:
            raise RuntimeError(f"listing {self.resource.plural} failed at every resourceVersion")
        resource_version = str((body.get("metadata") or {}).get("resourceVersion", ""))
        raw_items: list[Obj] = body.pop("items", None) or []
        del body
        first = not self.has_synced() and len(self.store) == 0
        kept: list[Obj] = []
        await self._ingest(raw_items, kept=None if first else kept)
        if not first:
            self._replace({object_key(item): item for item in kept})
        self._listed(resource_version)

    async def _list_in_pages(self, params: Mapping[str, Any]) -> None:
        """The first list, page by page, each page's items added as it arrives."""
        resource_version, token = "", ""
        while True:
            page_params = {**params, "resourceVersion": "", "limit": self._list_page}
            if token:
                page_params["continue"] = token
            page = await self._client.get(self._path(), **page_params)
            meta = page.get("metadata") or {}
            resource_version = resource_version or str(meta.get("resourceVersion", ""))
            items: list[Obj] = page.pop("items", None) or []
            del page
            await self._ingest(items, kept=None)
            token = str(meta.get("continue") or "")
            if not token:
                break
        self._listed(resource_version)

    def _listed(self, resource_version: str) -> None:
        """A list is in the store: count it, watch on from its version, and say so."""
        self.stats.lists += 1
        self.resource_version = resource_version
        self._synced.set()

    def _watch_params(self) -> dict[str, Any]:
        """A watch from the last resourceVersion with bookmarks and a random server timeout in
        [min, 2 min] (module docstring, step 2); a streaming relist adds its own two."""
        return {
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": self._rng.randint(
                self._min_watch_timeout, 2 * self._min_watch_timeout
            ),
            "labelSelector": self._label_selector,
            "fieldSelector": self._field_selector,
        }

    async def _relist_streaming(self) -> bool:
        """A relist as a streaming list (module docstring). False when the server refused it or
        its answer expired: the caller then lists at once."""
        stream_params = {
            **self._watch_params(),
            "resourceVersionMatch": "NotOlderThan",
            "sendInitialEvents": True,
        }
        fresh: dict[str, Obj] = {}
        try:
            async for event in self._client.watch(
                self._path(), params=stream_params, read_timeout=self._read_timeout
            ):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    self._apply(event)  # raises the error the Status names
                meta = obj.get("metadata") or {}
                if kind == "BOOKMARK":
                    if (meta.get("annotations") or {}).get(_INITIAL_EVENTS_END) == "true":
                        self._replace(fresh)
                        self.stats.streamed_relists += 1
                        self._listed(str(meta.get("resourceVersion") or ""))
                        return True
                    continue
                obj = self._transform(obj)
                key = object_key(obj)
                if kind == "DELETED" or (self._keep is not None and not self._keep(obj)):
                    fresh.pop(key, None)
                else:
                    fresh[key] = obj
        except (Gone, _Expired):
            return False
        except ApiError as error:
            if error.status not in (400, 422):
                raise
            log.info(
                "streaming lists refused, listing at once from now on",
                resource=self.resource.plural,
                error=str(error),
            )
            self._stream_relists = False
            return False
        # Closed before the bookmark (a restarting server): the run loop backs off and relists.
        raise RuntimeError("streaming list ended before its initial-events bookmark")

    async def _ingest(self, raw_items: list[Obj], *, kept: list[Obj] | None) -> None:
        """Transform and filter listed items in slices, with a loop turn between slices; add
        them to the store at once (`kept` None: the first list) or collect them into `kept`."""
        for start in range(0, len(raw_items), _LIST_SLICE):
            if start:
                await asyncio.sleep(0)  # a turn for the loop between slices (module docstring)
            chunk = raw_items[start : start + _LIST_SLICE]
            for index in range(start, start + len(chunk)):
                raw_items[index] = {}  # let the parsed original go as soon as it is transformed
            items = [self._transform(item) for item in chunk]
            del chunk
            items = [item for item in items if self._keep is None or self._keep(item)]
            if kept is None:
                self._add_all(items)
            else:
                kept.extend(items)

    def _add_all(self, items: list[Obj]) -> None:
        """The first list into an empty store: every item is an add."""
        for item in items:
            old = self.store.put(item)
            if old is None:
                self.handlers.on_add(item)
            elif _rv(old) != _rv(item):
                self.handlers.on_update(old, item)

    def _replace(self, fresh: Mapping[str, Obj]) -> None:
        """Make the store equal to a fresh list (its objects by key), notifying handlers of
        every difference."""
        for key in self.store.list_keys():
            if key not in fresh:
                old = self.store.remove(key)
                if old is not None:
                    self.handlers.on_delete(old)
        for item in fresh.values():
            old = self.store.put(item)
            if old is None:
                self.handlers.on_add(item)
            elif _rv(old) != _rv(item):
                self.handlers.on_update(old, item)

    # ---------------------------------------------------------------------------- watch
    async def _watch(self) -> None:
        params = self._watch_params()
        self.stats.watches += 1
        started, events = self._clock.now(), 0
        try:
            async for event in self._client.watch(
                self._path(), params=params, read_timeout=self._read_timeout
            ):
                events += 1
                self._apply(event)
        except Gone as error:
            raise _Expired from error
        except TimeoutError:
            # Nothing (not even a bookmark) arrived for `read_timeout`. The server sends no
            # bookmarks for a resource type that never changes, so an idle watch ends here as a
            # matter of course: re-watch from the same resourceVersion at once, as after a clean
            # end of stream. A half-open connection is replaced the same way. Not a failure.
            log.debug(
                "watch idle, re-watching",
                resource=self.resource.plural,
                idle_seconds=self._read_timeout,
            )
            self.stats.idle_rewatches += 1
            return
        if events == 0 and self._clock.now() - started < 1.0:
            # A proxy or a sick server cutting watches at once must not cause a hot loop.
            raise RuntimeError("very short watch: closed in under 1 s without events")

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            status = int(obj.get("code") or 0)
            if status == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise _Expired(obj.get("message", "expired"))
            raise ApiError(status, obj, "WATCH", self._path())
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        obj = self._transform(obj)
        filtered_out = False
        if kind in ("ADDED", "MODIFIED") and self._keep is not None and not self._keep(obj):
            filtered_out = True
            # Not (or no longer) interesting: drop it as if it were deleted.
            kind = "DELETED" if self.store.get(object_key(obj)) is not None else "IGNORED"
        if kind == "IGNORED":
            pass
        elif kind in ("ADDED", "MODIFIED"):
            old = self.store.put(obj)
            if old is None:
                self.handlers.on_add(obj)
            else:
                self.handlers.on_update(old, obj)
        elif kind == "DELETED":
            old = self.store.remove(object_key(obj))
            if filtered_out and old is not None:
                self.handlers.on_delete(old)  # the last state we kept (it still had the owner)
            elif old is not None or self._keep is None or self._keep(obj):
                self.handlers.on_delete(obj)
        else:
            log.warning("unknown watch event type", type=kind, resource=self.resource.plural)
            return
        if rv:
            self.resource_version = str(rv)

    async def _resync_loop(self) -> None:
        assert self._resync_period is not None
        while True:
            await self._clock.sleep(self._resync_period)
            for obj in self.store:
                self.handlers.on_update(obj, obj)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
