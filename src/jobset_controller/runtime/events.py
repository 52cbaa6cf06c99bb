"""An `events.k8s.io/v1` Event recorder that never slows down or breaks its caller.

Events are best-effort, supplemental data. So `EventRecorder.record` is synchronous, cheap and
never raises or blocks: it puts the occurrence on a bounded buffer and returns. One background
task (`run`) takes the buffer in the order recorded and writes it to the API server with up to
`max_in_flight` writes at once (8), one at a time per key, so an Event's series patch always
follows its create.

Why several writes at once: a write takes a round trip to the API server, and while the
controller reconciles thousands of JobSets that round trip is long (the API server is busy with
the reconciles' own writes). One write at a time then wrote fewer Events per second than the
reconciles recorded: at 20,000 suspended JobSets created at once, 1,292 of their 20,000 Events
were dropped from a full buffer. client-go's recorder writes one at a time too, but from Go, and
through a client of its own (controller-runtime gives the recorder its own rate limiter); the
manager gives ours one as well (`KubeClient.with_own_budget`), so Events do not wait behind the
reconciles' writes for the client-side budget, nor take theirs.

Aggregation, like client-go's `tools/events` broadcaster (read at kubernetes master, 2026):

- Occurrences are grouped by an isomorphic key. Upstream's key is (type, action, reason,
  reportingController, reportingInstance, regarding, related). The reporting fields are fixed
  per recorder and we never set `related`, so ours is (regarding, type, reason, action, note).
  Deliberate difference: the NOTE is part of our key. Upstream leaves it out, so a second
  occurrence with another message (say a different create error) is folded into the first
  Event's series and its text is never shown; we create a separate Event for it instead.
  `regarding` is compared whole, resourceVersion included, as upstream does: pass an `ObjectRef`
  without `resource_version` to aggregate across versions of the object.
- The first occurrence is created as an Event named `<regarding.name>.<hex>`, upstream's scheme
  (the hex is the wall-clock time in nanoseconds, made unique within this process).
- The first repeat (count 2) is written at once, as a patch of `series` {count, lastObservedTime}.
  Later repeats only update the count in memory; a heartbeat writes the changed series in one
  batch every `series_heartbeat` seconds. Upstream refreshes series every 30 minutes and writes
  a series' final count when it ends; we default to 30 s so `kubectl events` shows counts that
  are at most half a minute old, at a cost of one PATCH per active series per heartbeat.
- A series (or a single Event) ends once its key has not been seen for `SERIES_WINDOW`
  (6 minutes, upstream's finishTime): its final count is written and it is forgotten, so the
  next occurrence creates a new Event. Memory is bounded by the keys seen in the last window.
- A series patch that finds the Event gone (404: events expire, by default after 1 h) creates it
  again with its series.

Failures: a write that fails for a reason that passes (the connection refused or cut, a
timeout, a 5xx or 429 answer, a 401 or 403 other than a namespace being deleted) is tried again
after 0.5, 1, 2, 4, 8, 10, 10 and 10 s (`WRITE_RETRY_DELAYS`, about 45 s in all), then logged and
dropped; any other failure (invalid, a terminating namespace) is dropped at once. Why: an API
server restart (an upgrade) takes 10-20 s, and a recorder that drops on the first refused
connection lost the terminal Event of every JobSet that finished meanwhile (found by the soak,
hack/soak.py). Once it listens again, the API server answers 403 to service accounts for a moment
(its RBAC authorizer's caches have not synced: the soak lost an `AllJobsCompleted` Event to that
window), so 401 and 403 pass too; client-go drops on any error answer. A 403 that is for good (the
Role lacks `events`) costs the same 45 s of retries before the drop, and the log says why.
client-go retries refused connections up to 12 times, 10 s apart; ours is shorter because a
retrying write holds one of the `max_in_flight` slots, and while every slot waits on an
unreachable API server new occurrences wait in the buffer (and drop once it is full) rather than
pile up. A retried create that had reached the server meets AlreadyExists, which counts as done.
A full buffer drops the NEW occurrence, like client-go's broadcaster
(DropIfChannelFull). Both are counted in `jobset_events_dropped_total{controller, reason}`
(controller: the reporting controller; reason: `queue_full`, `write_failed` or `invalid`, an
unknown event type). Recorders of several controllers (upstream has `jobset` and `pod`) share
one `EventMetrics`.

Lifetime: start `run()` as a task once the loop runs; on shutdown cancel it and `await flush()`
(bounded by the caller's own timeout) to write what is buffered and the final series counts.
`record` must be called on the event loop's thread, like everything else in `runtime/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter

from jobset_controller.runtime.client import (
    AlreadyExists,
    ApiError,
    NotFound,
    ServerError,
    TooManyRequests,
)
from jobset_controller.runtime.clock import Clock, RealClock
from jobset_controller.runtime.resources import EVENTS

log = structlog.get_logger("events")

EventType = Literal["Normal", "Warning"]
NORMAL: Final = "Normal"
WARNING: Final = "Warning"
DEFAULT_ACTION: Final = "Reconciling"

MAX_PENDING: Final = 1000  # client-go's maxQueuedEvents
# Writes at once (module docstring): enough to cover the API server's round trip at the rate a
# controller records under load, few enough not to crowd the API server's inflight limit.
MAX_IN_FLIGHT: Final = 8
SERIES_WINDOW: Final = 6 * 60.0  # client-go's finishTime: a key unseen this long ends its series
# Pauses before each retry of a write failed for a reason that passes (module docstring).
WRITE_RETRY_DELAYS: Final = (0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0)
SERIES_HEARTBEAT: Final = 30.0  # how often changed series counts are written (see docstring)
NOTE_LIMIT_BYTES: Final = 1024  # apiserver validation: note is at most 1 KiB
REPORTING_INSTANCE_LIMIT: Final = 128  # apiserver validation
_TRUNCATED: Final = " ..."

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def passes(error: Exception) -> bool:
    """Whether a write that failed with `error` may succeed when tried again (module docstring)."""
    if isinstance(error, ConnectionError | TimeoutError | ServerError | TooManyRequests):
        return True
    if isinstance(error, ApiError) and error.status in (401, 403):
        return not error.namespace_terminating
    return False


class EventMetrics:
    """The recorder's metrics; make one per registry and share it between recorders."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.dropped = Counter(
            "jobset_events_dropped",
            "Events not written to the API server, by reporting controller and reason "
            "(queue_full, write_failed, invalid).",
            ["controller", "reason"],
            registry=registry,
        )


class EventWriter(Protocol):
    """The two KubeClient calls the recorder makes (`KubeClient` satisfies it)."""

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about (`regarding`), as plain data."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""

    @classmethod
    def from_object(
        cls, obj: Mapping[str, Any], *, with_resource_version: bool = False
    ) -> ObjectRef:
        """A reference to a raw API object (a dict with apiVersion, kind and metadata)."""
        meta = obj.get("metadata") or {}
        return cls(
            api_version=str(obj.get("apiVersion", "")),
            kind=str(obj.get("kind", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")) if with_resource_version else "",
        )

    def to_json(self) -> dict[str, str]:
        fields = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
        }
        return {key: value for key, value in fields.items() if value}


_Key = tuple[ObjectRef, str, str, str, str]  # regarding, type, reason, action, note


@dataclass(frozen=True, slots=True)
class _Occurrence:
    """One call of `record`, stamped with both clocks at the moment of the call."""

    key: _Key
    seen: float  # monotonic
    wall: datetime.datetime


@dataclass(slots=True)
class _Series:
    """What we know of one key's Event. `count > written` means a series write is due."""

    namespace: str
    name: str
    body: dict[str, Any]  # the Event as first created, without `series`
    last_seen: float  # monotonic, of the latest occurrence
    last_observed: datetime.datetime  # wall clock, of the latest occurrence
    count: int = 1
    written: int = 1  # the count last sent to the API server (sent, not necessarily stored)

    @property
    def path(self) -> str:
        return EVENTS.path(self.namespace, self.name)

    def series_json(self) -> dict[str, Any]:
        return {"count": self.count, "lastObservedTime": micro_time(self.last_observed)}


def micro_time(moment: datetime.datetime) -> str:
    """A MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_note(note: str, limit: int = NOTE_LIMIT_BYTES) -> str:
    """`note` cut to at most `limit` UTF-8 bytes on a character boundary, marked with " ...".

    The limit is in bytes because the apiserver checks the encoded length.
    """
    encoded = note.encode()
    if len(encoded) <= limit:
        return note
    head = encoded[: limit - len(_TRUNCATED)].decode(errors="ignore")
    return head + _TRUNCATED


class EventRecorder:
    """Records Events about objects; see the module docstring for the rules."""

    def __init__(
        self,
        client: EventWriter,
        *,
        reporting_controller: str,
        reporting_instance: str | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        max_pending: int = MAX_PENDING,
        max_in_flight: int = MAX_IN_FLIGHT,
        series_heartbeat: float = SERIES_HEARTBEAT,
        series_window: float = SERIES_WINDOW,
        metrics: EventMetrics | None = None,
    ) -> None:
        if max_pending < 1 or max_in_flight < 1:
            raise ValueError("max_pending and max_in_flight must be at least 1")
        if series_heartbeat <= 0 or series_window <= 0:
            raise ValueError("series_heartbeat and series_window must be positive")
        self._client = client
        self.reporting_controller = reporting_controller
        instance = reporting_instance or f"{reporting_controller}-{socket.gethostname()}"
        self.reporting_instance = instance[:REPORTING_INSTANCE_LIMIT]
        self._clock: Clock = clock or RealClock()
        self._wall_clock = wall_clock
        self._max_pending = max_pending
        self._series_heartbeat = series_heartbeat
        self._series_window = series_window
        metrics = metrics or EventMetrics(None)
        self._dropped = {
            reason: metrics.dropped.labels(reporting_controller, reason)
            for reason in ("queue_full", "write_failed", "invalid")
        }
        # Occurrences recorded and not yet handled by the writer, oldest first.
        self._pending: deque[_Occurrence] = deque()
        # Keys seen within the series window -> their Event. Only the writer touches it.
        self._series: dict[_Key, _Series] = {}
        self._wakeup = asyncio.Event()
        self._heartbeat_due = False
        self._write_lock = asyncio.Lock()  # run() and flush() never write at the same time
        # Writes under way, by key: the last one of each key, which the next of that key awaits.
        self._in_flight: dict[_Key, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._last_name_nanos = 0
        self._warned_full = False

    # ------------------------------------------------------------------ the caller's side
    def record(
        self,
        regarding: ObjectRef,
        type: EventType,
        reason: str,
        note: str,
        action: str = DEFAULT_ACTION,
    ) -> None:
        """Queue an Event about `regarding`. Never blocks, never raises."""
        try:
            if type not in (NORMAL, WARNING):
                self._dropped["invalid"].inc()
                log.error("dropping event with unsupported type", type=type, reason=reason)
                return
            if len(self._pending) >= self._max_pending:
                self._dropped["queue_full"].inc()
                if not self._warned_full:
                    self._warned_full = True
                    log.warning("event buffer full, dropping new events", limit=self._max_pending)
                return
            key: _Key = (regarding, type, reason, action, truncate_note(note))
            self._pending.append(_Occurrence(key, self._clock.now(), self._wall_clock()))
            self._wakeup.set()
        except Exception:  # a recorder must not break a reconcile
            log.exception("recording event failed", reason=reason)

    @property
    def pending(self) -> int:
        """Occurrences waiting for the writer (for tests and metrics)."""
        return len(self._pending)

    # ------------------------------------------------------------------ the writer's side
    async def run(self) -> None:
        """Write recorded Events until cancelled."""
        ticker = asyncio.create_task(self._tick(), name="event-series-heartbeat")
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                await self._write(force_heartbeat=False)
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    async def flush(self) -> None:
        """Write everything buffered now, and every series count not yet written. Cancelled
        (its caller's time ran out), it cancels the writes still under way."""
        try:
            await self._write(force_heartbeat=True)
        except asyncio.CancelledError:
            for task in list(self._in_flight.values()):
                task.cancel()
            raise

    async def _tick(self) -> None:
        while True:
            await self._clock.sleep(self._series_heartbeat)
            self._heartbeat_due = True
            self._wakeup.set()

    async def _write(self, *, force_heartbeat: bool) -> None:
        async with self._write_lock:
            while self._pending:
                await self._slots.acquire()  # at most max_in_flight writes at once
                self._start(self._pending.popleft())
            self._warned_full = False
            if force_heartbeat or self._heartbeat_due:
                self._heartbeat_due = False
                await self._settle()  # a series is written once its create has been
                await self._heartbeat()
            if force_heartbeat:
                await self._settle()

    def _start(self, occurrence: _Occurrence) -> None:
        """Handle `occurrence` in a task of its own, after the one of its key under way."""
        key = occurrence.key
        task = asyncio.get_running_loop().create_task(
            self._handle_in_turn(occurrence, self._in_flight.get(key))
        )
        self._in_flight[key] = task

        def done(task: asyncio.Task[None]) -> None:
            self._slots.release()
            if self._in_flight.get(key) is task:
                del self._in_flight[key]

        task.add_done_callback(done)

    async def _handle_in_turn(
        self, occurrence: _Occurrence, before: asyncio.Task[None] | None
    ) -> None:
        if before is not None:
            await asyncio.wait([before])  # its outcome is its own to log
        try:
            await self._handle(occurrence)
        except Exception:
            log.exception("handling event failed", reason=occurrence.key[2])

    async def _settle(self) -> None:
        """Until every write under way has ended."""
        while self._in_flight:
            await asyncio.wait(list(self._in_flight.values()))

    async def _handle(self, occurrence: _Occurrence) -> None:
        series = self._series.get(occurrence.key)
        if series is not None and occurrence.seen - series.last_seen > self._series_window:
            await self._finish(occurrence.key, series)
            series = None
        if series is None:
            series = self._new_series(occurrence)
            self._series[occurrence.key] = series
            await self._create(series, with_series=False)
            return
        series.count += 1
        series.last_seen = occurrence.seen
        series.last_observed = occurrence.wall
        if series.count == 2:  # the first repeat turns the Event into a series at once
            await self._write_series(series)

    async def _heartbeat(self) -> None:
        """Write changed series counts; forget keys whose window has passed."""
        now = self._clock.now()
        for key, series in list(self._series.items()):
            try:
                if now - series.last_seen > self._series_window:
                    await self._finish(key, series)
                elif series.count > series.written:
                    await self._write_series(series)
            except Exception:  # a recorder must never break its caller (shutdown flush included)
                log.exception("writing event series failed", event_name=series.name)

    async def _finish(self, key: _Key, series: _Series) -> None:
        if series.count > series.written:
            await self._write_series(series)
        del self._series[key]

    # ------------------------------------------------------------------ API writes
    def _new_series(self, occurrence: _Occurrence) -> _Series:
        regarding, event_type, reason, action, note = occurrence.key
        namespace = regarding.namespace or "default"
        name = f"{regarding.name}.{self._unique_nanos(occurrence.wall):x}"
        body: dict[str, Any] = {
            "apiVersion": EVENTS.api_version,
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": micro_time(occurrence.wall),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": event_type,
            "regarding": regarding.to_json(),
        }
        return _Series(namespace, name, body, occurrence.seen, occurrence.wall)

    def _unique_nanos(self, moment: datetime.datetime) -> int:
        nanos = (moment - _EPOCH) // datetime.timedelta(microseconds=1) * 1000
        self._last_name_nanos = max(nanos, self._last_name_nanos + 1)
        return self._last_name_nanos

    async def _retrying(self, write: Callable[[], Awaitable[object]]) -> None:
        """`write()`, tried again after each of `WRITE_RETRY_DELAYS` while it fails for a reason
        that passes (module docstring); the last failure is raised."""
        for delay in (*WRITE_RETRY_DELAYS, None):
            try:
                await write()
                return
            except Exception as error:
                if delay is None or not passes(error):
                    raise
            await self._clock.sleep(delay)

    async def _create(self, series: _Series, *, with_series: bool) -> None:
        body = dict(series.body)
        if with_series:
            body["series"] = series.series_json()
        try:
            await self._retrying(lambda: self._client.create(EVENTS.path(series.namespace), body))
        except AlreadyExists:
            log.debug("event already exists", event_name=series.name, namespace=series.namespace)
        except Exception as error:
            self._dropped["write_failed"].inc()
            log.warning(
                "creating event failed, dropped",
                event_name=series.name,
                namespace=series.namespace,
                reason=series.body["reason"],
                error=str(error),
            )

    async def _write_series(self, series: _Series) -> None:
        series.written = series.count
        patch = {"series": series.series_json()}
        try:
            await self._retrying(lambda: self._client.merge_patch(series.path, patch))
        except NotFound:  # expired or deleted: create it again, series included
            await self._create(series, with_series=True)
        except Exception as error:
            self._dropped["write_failed"].inc()
            log.warning(
                "updating event series failed, dropped",
                event_name=series.name,
                namespace=series.namespace,
                count=series.count,
                error=str(error),
            )
