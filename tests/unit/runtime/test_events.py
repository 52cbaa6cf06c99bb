"""EventRecorder: buffering, aggregation into series, and failure handling.

The recorder's only collaborator is the pair of KubeClient calls it makes (create and
merge_patch); `RecordingWriter` stands in for them, keeps created Events by path and answers a
patch of an Event it does not hold with 404, as the API server would.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import re
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jobset_controller.runtime.client import (
    ApiError,
    Forbidden,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
)
from jobset_controller.runtime.clock import FakeClock
from jobset_controller.runtime.events import (
    NOTE_LIMIT_BYTES,
    SERIES_HEARTBEAT,
    SERIES_WINDOW,
    WRITE_RETRY_DELAYS,
    EventMetrics,
    EventRecorder,
    ObjectRef,
    passes,
)
from jobset_controller_dev.envtest.polling import eventually

WALL = datetime.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=datetime.UTC)
JOBSET = ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "train", "team-a", "uid-1")
EVENTS = "/apis/events.k8s.io/v1/namespaces/team-a/events"


class RecordingWriter:
    """In-memory stand-in for the KubeClient calls the recorder makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.stored: dict[str, dict[str, Any]] = {}
        self.error: Exception | None = None

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", path, dict(body)))
        if self.error is not None:
            raise self.error
        self.stored[f"{path}/{body['metadata']['name']}"] = dict(body)
        return dict(body)

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch", path, dict(patch)))
        if self.error is not None:
            raise self.error
        if path not in self.stored:
            raise NotFound(404, {"reason": "NotFound"}, "PATCH", path)
        self.stored[path].update(patch)
        return self.stored[path]

    def verbs(self) -> list[str]:
        return [verb for verb, _, _ in self.calls]


@pytest.fixture
def writer() -> RecordingWriter:
    return RecordingWriter()


@pytest.fixture
def recorder(
    writer: RecordingWriter, clock: FakeClock, registry: CollectorRegistry
) -> EventRecorder:
    return EventRecorder(
        writer,
        reporting_controller="jobset",
        reporting_instance="jobset-controller-0",
        clock=clock,
        wall_clock=lambda: WALL,
        metrics=EventMetrics(registry),
    )


def dropped(registry: CollectorRegistry, reason: str) -> float:
    labels = {"controller": "jobset", "reason": reason}
    value = registry.get_sample_value("jobset_events_dropped_total", labels)
    assert value is not None
    return value


async def test_first_occurrence_creates_an_events_k8s_io_v1_event(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    recorder.record(JOBSET, "Warning", "JobCreationFailed", "quota exceeded")
    await recorder.flush()

    [(verb, path, body)] = writer.calls
    assert (verb, path) == ("create", EVENTS)
    assert re.fullmatch(r"train\.[0-9a-f]+", body["metadata"]["name"])
    assert body["metadata"]["namespace"] == "team-a"
    assert body == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": body["metadata"],
        "eventTime": "2026-03-04T05:06:07.891011Z",
        "reportingController": "jobset",
        "reportingInstance": "jobset-controller-0",
        "action": "Reconciling",
        "reason": "JobCreationFailed",
        "note": "quota exceeded",
        "type": "Warning",
        "regarding": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "train",
            "namespace": "team-a",
            "uid": "uid-1",
        },
    }


async def test_event_about_a_cluster_scoped_object_goes_to_the_default_namespace(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    recorder.record(ObjectRef("v1", "Node", "node-1"), "Normal", "Seen", "hello")
    await recorder.flush()

    [(_, path, body)] = writer.calls
    assert path == "/apis/events.k8s.io/v1/namespaces/default/events"
    assert body["metadata"]["namespace"] == "default"
    assert "namespace" not in body["regarding"]


async def flush_through_retries(recorder: EventRecorder, clock: FakeClock) -> None:
    """`flush`, moving virtual time on until every retry pause has passed."""
    flushing = asyncio.ensure_future(recorder.flush())
    for _ in range(len(WRITE_RETRY_DELAYS) + 2):
        await clock.advance(max(WRITE_RETRY_DELAYS))
    await flushing


async def test_record_never_raises_or_blocks_when_the_client_fails(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry, clock: FakeClock
) -> None:
    writer.error = ServerError(500, {"message": "etcd is down"})
    for attempt in range(3):
        recorder.record(JOBSET, "Warning", "JobCreationFailed", f"try {attempt}")
    assert writer.calls == []  # record itself made no call

    await flush_through_retries(recorder, clock)

    assert writer.verbs() == ["create"] * 3 * (len(WRITE_RETRY_DELAYS) + 1)
    assert dropped(registry, "write_failed") == 3
    assert recorder.pending == 0


async def test_a_client_error_that_is_not_an_api_error_is_dropped_too(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry, clock: FakeClock
) -> None:
    writer.error = ConnectionResetError("connection reset by peer")
    recorder.record(JOBSET, "Normal", "Reason", "note")
    await flush_through_retries(recorder, clock)

    assert dropped(registry, "write_failed") == 1


async def test_a_write_refused_while_the_api_server_restarts_is_written_once_it_is_back(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry, clock: FakeClock
) -> None:
    # An API server restart (10-20 s) refuses connections; the terminal Event of a JobSet that
    # finished meanwhile must still be written (the soak lost them before the retry).
    writer.error = ConnectionRefusedError("connection refused")
    recorder.record(JOBSET, "Normal", "AllJobsCompleted", "jobset completed successfully")
    flushing = asyncio.ensure_future(recorder.flush())
    await clock.advance(sum(WRITE_RETRY_DELAYS[:4]))  # 7.5 s: four tries refused
    assert writer.verbs() == ["create"] * 5
    writer.error = None
    await clock.advance(WRITE_RETRY_DELAYS[4])
    await flushing

    assert [call[2]["reason"] for call in writer.calls[-1:]] == ["AllJobsCompleted"]
    assert len(writer.stored) == 1
    assert dropped(registry, "write_failed") == 0


async def test_a_write_forbidden_while_the_restarted_api_server_syncs_its_rbac_is_retried(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry, clock: FakeClock
) -> None:
    # For a moment after it listens again, kube-apiserver answers 403 to service accounts (its
    # authorizer's caches are not synced): the soak lost an AllJobsCompleted Event there.
    writer.error = Forbidden(
        403, {"reason": "Forbidden", "message": 'User "system:serviceaccount:x" cannot create'}
    )
    recorder.record(JOBSET, "Normal", "AllJobsCompleted", "jobset completed successfully")
    flushing = asyncio.ensure_future(recorder.flush())
    await clock.advance(WRITE_RETRY_DELAYS[0])
    assert writer.verbs() == ["create"] * 2
    writer.error = None
    await clock.advance(WRITE_RETRY_DELAYS[1])
    await flushing

    assert len(writer.stored) == 1
    assert dropped(registry, "write_failed") == 0


TERMINATING = Forbidden(
    403,
    {
        "reason": "Forbidden",
        "message": "unable to create new content in namespace team-a: it is being terminated",
        "details": {
            "causes": [{"reason": "NamespaceTerminating", "message": "namespace is terminating"}]
        },
    },
)


@pytest.mark.parametrize(
    "error",
    [TERMINATING, Invalid(422, {"reason": "Invalid", "message": "note: Too long"})],
    ids=["namespace-terminating", "invalid"],
)
async def test_a_write_the_server_refuses_for_good_is_not_retried(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry, error: Exception
) -> None:
    writer.error = error
    recorder.record(JOBSET, "Normal", "Reason", "note")
    await recorder.flush()

    assert writer.verbs() == ["create"]
    assert dropped(registry, "write_failed") == 1


@pytest.mark.parametrize(
    ("error", "passes_"),
    [
        (ConnectionResetError("reset"), True),
        (TimeoutError(), True),
        (ServerError(503, {}), True),
        (TooManyRequests(429, {}), True),
        (ApiError(401, {"reason": "Unauthorized"}), True),
        (Forbidden(403, {"reason": "Forbidden"}), True),
        (TERMINATING, False),
        (Invalid(422, {}), False),
        (ApiError(400, {"reason": "BadRequest"}), False),
        (ValueError("not an API answer"), False),
    ],
)
def test_which_failed_writes_pass(error: Exception, passes_: bool) -> None:
    assert passes(error) is passes_


async def test_identical_repeat_becomes_a_series_with_count_2_instead_of_a_new_event(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    recorder.record(JOBSET, "Warning", "JobCreationFailed", "quota exceeded")
    recorder.record(JOBSET, "Warning", "JobCreationFailed", "quota exceeded")
    await recorder.flush()

    assert writer.verbs() == ["create", "patch"]
    name = writer.calls[0][2]["metadata"]["name"]
    _, path, patch = writer.calls[1]
    assert path == f"{EVENTS}/{name}"
    assert patch == {"series": {"count": 2, "lastObservedTime": "2026-03-04T05:06:07.891011Z"}}


async def test_later_repeats_are_written_in_one_batch_at_the_heartbeat(
    recorder: EventRecorder, writer: RecordingWriter, clock: FakeClock
) -> None:
    task = asyncio.create_task(recorder.run())
    try:
        for _ in range(4):
            recorder.record(JOBSET, "Normal", "SuspendedJobs", "jobset is suspended")
        await clock.settle()
        assert writer.verbs() == ["create", "patch"]  # count 2 at once; 3 and 4 wait

        await clock.advance(SERIES_HEARTBEAT)
        assert writer.verbs() == ["create", "patch", "patch"]
        assert writer.calls[-1][2]["series"]["count"] == 4

        await clock.advance(SERIES_HEARTBEAT)
        assert len(writer.calls) == 3  # nothing changed, nothing written
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(
            (JOBSET, "Warning", "JobCreationFailed", "another error"), id="different note"
        ),
        pytest.param(
            (JOBSET, "Normal", "JobCreationFailed", "quota exceeded"), id="different type"
        ),
        pytest.param(
            (JOBSET, "Warning", "PVCCreationFailed", "quota exceeded"), id="different reason"
        ),
        pytest.param(
            (
                ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "train", "team-a", "uid-2"),
                "Warning",
                "JobCreationFailed",
                "quota exceeded",
            ),
            id="different regarding uid",
        ),
    ],
)
async def test_events_that_differ_are_separate_events(
    recorder: EventRecorder, writer: RecordingWriter, other: tuple[Any, ...]
) -> None:
    recorder.record(JOBSET, "Warning", "JobCreationFailed", "quota exceeded")
    recorder.record(*other)
    await recorder.flush()

    assert writer.verbs() == ["create", "create"]
    names = {body["metadata"]["name"] for _, _, body in writer.calls}
    assert len(names) == 2  # unique even when recorded in the same microsecond


async def test_a_different_action_is_a_separate_event(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    recorder.record(JOBSET, "Normal", "Reason", "note")
    recorder.record(JOBSET, "Normal", "Reason", "note", action="Restarting")
    await recorder.flush()

    assert [body["action"] for _, _, body in writer.calls] == ["Reconciling", "Restarting"]


async def test_a_repeat_after_the_series_window_creates_a_new_event(
    recorder: EventRecorder, writer: RecordingWriter, clock: FakeClock
) -> None:
    recorder.record(JOBSET, "Normal", "Reason", "note")
    await recorder.flush()
    await clock.advance(SERIES_WINDOW + 1)
    recorder.record(JOBSET, "Normal", "Reason", "note")
    await recorder.flush()

    assert writer.verbs() == ["create", "create"]


async def test_an_ended_series_writes_its_final_count_and_is_forgotten(
    recorder: EventRecorder, writer: RecordingWriter, clock: FakeClock
) -> None:
    for _ in range(3):
        recorder.record(JOBSET, "Normal", "Reason", "note")
    await clock.advance(SERIES_WINDOW + 1)
    await recorder.flush()
    assert writer.verbs() == ["create", "patch", "patch"]
    assert writer.calls[-1][2]["series"]["count"] == 3

    recorder.record(JOBSET, "Normal", "Reason", "note")
    await recorder.flush()
    assert writer.verbs()[-1] == "create"


async def test_a_series_update_of_a_vanished_event_creates_it_again_with_its_series(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    recorder.record(JOBSET, "Normal", "Reason", "note")
    await recorder.flush()
    writer.stored.clear()  # the Event expired on the server

    recorder.record(JOBSET, "Normal", "Reason", "note")
    await recorder.flush()

    assert writer.verbs() == ["create", "patch", "create"]
    first, recreated = writer.calls[0][2], writer.calls[2][2]
    assert recreated["metadata"]["name"] == first["metadata"]["name"]
    assert recreated["series"]["count"] == 2


async def test_full_buffer_drops_new_events_and_counts_them(
    writer: RecordingWriter, registry: CollectorRegistry
) -> None:
    recorder = EventRecorder(
        writer,
        reporting_controller="jobset",
        clock=FakeClock(),
        max_pending=2,
        metrics=EventMetrics(registry),
    )
    for number in range(5):
        recorder.record(JOBSET, "Normal", "Reason", f"note {number}")

    assert recorder.pending == 2
    assert dropped(registry, "queue_full") == 3
    await recorder.flush()
    assert [body["note"] for _, _, body in writer.calls] == ["note 0", "note 1"]


async def test_unsupported_event_type_is_dropped_and_counted(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry
) -> None:
    recorder.record(JOBSET, "Error", "Reason", "note")  # type: ignore[arg-type]
    await recorder.flush()

    assert writer.calls == []
    assert dropped(registry, "invalid") == 1


@pytest.mark.parametrize("character", ["x", "é", "💥"], ids=["ascii", "two-byte", "four-byte"])
async def test_long_note_is_truncated_to_the_apiserver_limit(
    recorder: EventRecorder, writer: RecordingWriter, character: str
) -> None:
    recorder.record(JOBSET, "Warning", "JobCreationFailed", character * 5000)
    await recorder.flush()

    note = writer.calls[0][2]["note"]
    assert len(note.encode()) <= NOTE_LIMIT_BYTES
    assert note.startswith(character * 100)
    assert note.endswith(" ...")


async def test_note_at_the_limit_is_kept_whole(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    recorder.record(JOBSET, "Normal", "Reason", "y" * NOTE_LIMIT_BYTES)
    await recorder.flush()

    assert writer.calls[0][2]["note"] == "y" * NOTE_LIMIT_BYTES


async def test_flush_writes_everything_buffered_in_recording_order(
    recorder: EventRecorder, writer: RecordingWriter
) -> None:
    for reason in ("First", "Second", "Third"):
        recorder.record(JOBSET, "Normal", reason, "note")
    assert writer.calls == []

    await recorder.flush()

    assert [body["reason"] for _, _, body in writer.calls] == ["First", "Second", "Third"]
    assert recorder.pending == 0


async def test_run_writes_recorded_events_without_a_flush(
    recorder: EventRecorder, writer: RecordingWriter, clock: FakeClock
) -> None:
    task = asyncio.create_task(recorder.run())
    try:
        recorder.record(JOBSET, "Normal", "Reason", "note")
        await clock.settle()
        assert writer.verbs() == ["create"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_default_reporting_instance_names_controller_and_host(
    writer: RecordingWriter,
) -> None:
    recorder = EventRecorder(writer, reporting_controller="pod", clock=FakeClock())

    assert recorder.reporting_controller == "pod"
    assert recorder.reporting_instance.startswith("pod-")
    assert len(recorder.reporting_instance) <= 128


def test_recorders_of_two_controllers_share_one_metrics_object(
    writer: RecordingWriter, registry: CollectorRegistry
) -> None:
    metrics = EventMetrics(registry)
    jobset = EventRecorder(
        writer, reporting_controller="jobset", clock=FakeClock(), max_pending=1, metrics=metrics
    )
    pod = EventRecorder(
        writer, reporting_controller="pod", clock=FakeClock(), max_pending=1, metrics=metrics
    )
    for recorder in (jobset, pod, pod):
        recorder.record(JOBSET, "Normal", "Reason", "one")
        recorder.record(JOBSET, "Normal", "Reason", "two")

    sample = registry.get_sample_value
    assert (
        sample("jobset_events_dropped_total", {"controller": "jobset", "reason": "queue_full"}) == 1
    )
    assert sample("jobset_events_dropped_total", {"controller": "pod", "reason": "queue_full"}) == 3


def test_object_ref_from_a_raw_object_leaves_out_the_resource_version_by_default() -> None:
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "42"},
    }

    assert ObjectRef.from_object(obj) == ObjectRef("batch/v1", "Job", "j", "ns", "u")
    assert ObjectRef.from_object(obj, with_resource_version=True).resource_version == "42"


async def test_flush_never_raises_when_series_writes_fail(
    recorder: EventRecorder, writer: RecordingWriter, registry: CollectorRegistry, clock: FakeClock
) -> None:
    # Shutdown flushes with a heartbeat; a series whose update and re-create both fail (the
    # namespace is being deleted, say) must be dropped quietly, not crash the process.
    recorder.record(JOBSET, "Warning", "BackoffLimitExceeded", "same")
    recorder.record(JOBSET, "Warning", "BackoffLimitExceeded", "same")
    await recorder.flush()
    recorder.record(JOBSET, "Warning", "BackoffLimitExceeded", "same")
    writer.error = ServerError(500, {"message": "etcd is down"})
    await flush_through_retries(recorder, clock)
    assert dropped(registry, "write_failed") >= 1


class SlowWriter(RecordingWriter):
    """Answers each write only when the test says so: writes under way can be counted, and
    `started` lists each one (verb, reason or series) as it starts."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.under_way = 0
        self.most = 0
        self.started: list[tuple[str, Any]] = []

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.started.append(("create", body["reason"]))
        await self._wait()
        return await super().create(path, body)

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.started.append(("patch", patch))
        await self._wait()
        return await super().merge_patch(path, patch)

    async def _wait(self) -> None:
        self.under_way += 1
        self.most = max(self.most, self.under_way)
        try:
            await self.open.wait()
        finally:
            self.under_way -= 1


async def test_writes_of_different_events_overlap_up_to_the_limit(clock: FakeClock) -> None:
    """A write's round trip does not hold the next Event back: the writer keeps up with a
    controller that records faster than one write at a time."""
    writer = SlowWriter()
    recorder = EventRecorder(writer, reporting_controller="jobset", clock=clock, max_in_flight=3)
    for index in range(7):
        recorder.record(JOBSET, "Normal", f"Reason{index}", "note")
    flushing = asyncio.create_task(recorder.flush())
    await eventually(lambda: writer.under_way == 3, "writer.under_way == 3", 5, interval=0)
    assert not flushing.done()
    writer.open.set()
    await flushing
    assert writer.most == 3
    assert sorted(body["reason"] for _, _, body in writer.calls) == [
        f"Reason{index}" for index in range(7)
    ]


async def test_a_repeat_waits_for_its_events_create_before_its_series_patch(
    clock: FakeClock,
) -> None:
    writer = SlowWriter()
    recorder = EventRecorder(
        writer, reporting_controller="jobset", clock=clock, wall_clock=lambda: WALL
    )
    recorder.record(JOBSET, "Normal", "Same", "note")
    recorder.record(JOBSET, "Normal", "Same", "note")
    recorder.record(JOBSET, "Normal", "Other", "note")
    flushing = asyncio.create_task(recorder.flush())
    await eventually(
        lambda: writer.under_way == 2, "writer.under_way == 2", 5, interval=0
    )  # the two creates; the patch waits its turn
    assert writer.started == [("create", "Same"), ("create", "Other")]
    writer.open.set()
    await flushing
    assert writer.verbs() == ["create", "create", "patch"]
    assert writer.calls[2][2] == {
        "series": {"count": 2, "lastObservedTime": "2026-03-04T05:06:07.891011Z"}
    }


async def test_a_flush_cancelled_by_its_deadline_cancels_the_writes_under_way(
    clock: FakeClock,
) -> None:
    writer = SlowWriter()
    recorder = EventRecorder(writer, reporting_controller="jobset", clock=clock)
    recorder.record(JOBSET, "Normal", "Reason", "note")
    flushing = asyncio.create_task(recorder.flush())
    await eventually(lambda: writer.under_way == 1, "writer.under_way == 1", 5, interval=0)
    flushing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flushing
    await eventually(
        lambda: writer.under_way == 0, "writer.under_way == 0", 5, interval=0
    )  # cancelled, not left pending
