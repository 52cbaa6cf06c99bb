"""configure_logging, observed through the text it writes to a stream (with the context keys the
workers bind around each reconcile)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from jobset_controller.runtime.logging import configure_logging, parse_level


class TerminalStream(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_time_level_logger_and_message(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)

    structlog.get_logger("informer").info("watch started", resource="jobs")

    [line] = json_lines(stream)
    assert line["msg"] == "watch started"
    assert line["level"] == "info"
    assert line["logger"] == "informer"
    assert line["resource"] == "jobs"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", line["ts"])


def test_every_line_inside_a_reconcile_carries_its_keys(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)
    log = structlog.get_logger("controller")

    reconcile_id = "r-1"
    with structlog.contextvars.bound_contextvars(
        jobset="train", namespace="team-a", reconcile_id=reconcile_id
    ):
        log.info("creating jobs")
        logging.getLogger("aiohttp.client").warning("slow answer")
    log.info("idle")

    inside_1, inside_2, after = json_lines(stream)
    for line in (inside_1, inside_2):
        assert (line["jobset"], line["namespace"]) == ("train", "team-a")
        assert line["reconcile_id"] == reconcile_id
    assert "jobset" not in after
    assert "reconcile_id" not in after


async def test_reconcile_keys_belong_to_the_task_that_bound_them(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)
    log = structlog.get_logger("controller")

    async def reconcile(name: str) -> None:
        with structlog.contextvars.bound_contextvars(jobset=name, reconcile_id=f"id-{name}"):
            await asyncio.sleep(0)  # let the other worker bind its keys in between
            log.info("reconciled")

    await asyncio.gather(reconcile("a"), reconcile("b"))

    assert sorted((line["jobset"], line["reconcile_id"]) for line in json_lines(stream)) == [
        ("a", "id-a"),
        ("b", "id-b"),
    ]


def test_standard_library_records_come_out_in_the_same_format(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)

    logging.getLogger("kubernetes.client").warning("retrying %s after %d s", "GET", 2)

    [line] = json_lines(stream)
    assert line["msg"] == "retrying GET after 2 s"
    assert line["logger"] == "kubernetes.client"
    assert line["level"] == "warning"
    assert "ts" in line


def test_lines_below_the_level_are_dropped(stream: io.StringIO) -> None:
    configure_logging("warning", "json", stream=stream)

    structlog.get_logger("x").info("quiet")
    logging.getLogger("aiohttp").info("quiet too")
    structlog.get_logger("x").error("loud")

    assert [line["msg"] for line in json_lines(stream)] == ["loud"]


def test_exceptions_are_structured_in_json(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        structlog.get_logger("x").exception("reconcile failed")

    [line] = json_lines(stream)
    assert line["exception"][0]["exc_type"] == "RuntimeError"
    assert line["exception"][0]["exc_value"] == "boom"


def test_console_format_is_readable_text(stream: io.StringIO) -> None:
    configure_logging("info", "console", stream=stream)

    with structlog.contextvars.bound_contextvars(jobset="train", reconcile_id="r1"):
        structlog.get_logger("informer").info("watch started", resource="jobs")

    text = stream.getvalue()
    assert "watch started" in text
    assert "resource=jobs" in text
    assert "jobset=train" in text
    assert "info" in text
    assert "\x1b[" not in text  # no colour codes when the stream is not a terminal
    assert not text.lstrip().startswith("{")


def test_auto_format_is_json_off_a_terminal_and_console_on_one() -> None:
    plain, terminal = io.StringIO(), TerminalStream()

    configure_logging("info", "auto", stream=plain)
    structlog.get_logger("x").info("hello")
    configure_logging("info", "auto", stream=terminal)
    structlog.get_logger("x").info("hello")

    assert json.loads(plain.getvalue())["msg"] == "hello"
    assert "hello" in terminal.getvalue()
    assert not terminal.getvalue().startswith("{")


def test_reconfiguring_replaces_the_handler(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=io.StringIO())
    configure_logging("info", "json", stream=stream)

    logging.getLogger("x").warning("once")

    assert len(logging.getLogger().handlers) == 1
    assert len(json_lines(stream)) == 1


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("debug", logging.DEBUG),
        ("INFO", logging.INFO),
        ("warn", logging.WARNING),
        ("error", logging.ERROR),
        ("0", logging.INFO),
        ("2", logging.DEBUG),
        (3, logging.DEBUG),
    ],
)
def test_level_names_and_zap_verbosity_numbers(level: str | int, expected: int) -> None:
    assert parse_level(level) == expected


def test_unknown_level_or_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="log level"):
        parse_level("loud")
    with pytest.raises(ValueError, match="log format"):
        configure_logging("info", "xml", stream=io.StringIO())  # type: ignore[arg-type]


def _fail_holding_a_secret() -> None:
    authorization = "Bearer s3cr3t"
    headers = {"Authorization": authorization, "User-Agent": "jobset-controller"}
    raise PermissionError(f"refused ({len(headers)} headers sent)")


def _log_failure() -> None:
    try:
        _fail_holding_a_secret()
    except PermissionError:
        structlog.get_logger("workers").exception("reconcile failed, will retry with backoff")


def test_json_exceptions_carry_type_message_and_frames_but_never_locals(
    stream: io.StringIO,
) -> None:
    configure_logging("info", "json", stream=stream)

    _log_failure()

    text = stream.getvalue()
    assert "s3cr3t" not in text
    assert "Authorization" not in text
    assert "locals" not in text
    [line] = json_lines(stream)
    [exception] = line["exception"]
    assert exception["exc_type"] == "PermissionError"
    assert exception["exc_value"] == "refused (2 headers sent)"
    frames = [(frame["name"], frame["filename"]) for frame in exception["frames"]]
    assert ("_log_failure", __file__) in frames
    assert ("_fail_holding_a_secret", __file__) in frames
    assert all(isinstance(frame["lineno"], int) for frame in exception["frames"])


def test_standard_library_exceptions_never_carry_locals_either(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream)

    try:
        _fail_holding_a_secret()
    except PermissionError:
        logging.getLogger("aiohttp.client").exception("request failed")

    assert "s3cr3t" not in stream.getvalue()
    [line] = json_lines(stream)
    assert line["exception"][0]["exc_type"] == "PermissionError"


@pytest.mark.parametrize("terminal", [False, True])
def test_console_exceptions_are_a_plain_traceback_without_locals(terminal: bool) -> None:
    stream = TerminalStream() if terminal else io.StringIO()
    configure_logging("info", "console", stream=stream)

    _log_failure()

    text = stream.getvalue()
    assert "s3cr3t" not in text
    assert "Authorization" not in text
    assert "Traceback (most recent call last):" in text
    assert re.search(r'File ".*test_logging\.py", line \d+, in _fail_holding_a_secret', text)
    assert "PermissionError: refused (2 headers sent)" in text


@pytest.mark.parametrize(
    ("encoding", "pattern"),
    [
        ("epoch", r"1\d{9}\.\d+"),
        ("millis", r"1\d{12}\.?\d*"),
        ("nano", r"1\d{18}"),
        ("iso8601", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"),
        ("rfc3339", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"),
        ("rfc3339nano", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z"),
    ],
)
def test_zap_time_encodings_shape_the_timestamp(
    stream: io.StringIO, encoding: Any, pattern: str
) -> None:
    configure_logging("info", "json", stream=stream, time_encoding=encoding)
    structlog.get_logger("t").info("tick")
    logging.getLogger("aiohttp").warning("tock")
    for line in json_lines(stream):
        assert re.fullmatch(pattern, str(line["ts"])), (encoding, line["ts"])
    if encoding == "nano":
        assert all(isinstance(line["ts"], int) for line in json_lines(stream))


def test_zap_stacktrace_level_adds_the_calling_stack_at_and_above_it(
    stream: io.StringIO,
) -> None:
    configure_logging("info", "json", stream=stream, stacktrace_level="error")
    log = structlog.get_logger("t")
    log.info("fine")
    log.error("broken")
    fine, broken = json_lines(stream)
    assert "stack" not in fine
    assert "test_zap_stacktrace_level_adds_the_calling_stack" in broken["stack"]


def test_stacktrace_level_panic_adds_no_stack(stream: io.StringIO) -> None:
    configure_logging("info", "json", stream=stream, stacktrace_level="panic")
    structlog.get_logger("t").critical("bad")
    [line] = json_lines(stream)
    assert "stack" not in line


def test_unknown_time_encoding_and_stacktrace_level_are_refused(stream: io.StringIO) -> None:
    with pytest.raises(ValueError, match="unknown time encoding"):
        configure_logging("info", "json", stream=stream, time_encoding="unix")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown stacktrace level"):
        configure_logging("info", "json", stream=stream, stacktrace_level="warn")
