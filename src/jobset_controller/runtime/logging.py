"""Structured logging: JSON lines in a cluster, readable lines in a terminal.

`configure_logging(level, format)` is called once by the entry point. After it:

- Every record goes through the standard library's root logger and one handler, so structlog
  loggers (`structlog.get_logger("informer")`) and plain `logging` users (asyncio; the
  kubernetes package where runtime/kubeconfig.py lets it read a kubeconfig) come out in the same
  format, filtered by the same level.
- `format="json"` writes one JSON object per line with `ts` (ISO 8601, UTC), `level`, `logger`,
  `msg` and the event's key/values (zap's key names, as upstream's JSON logs use);
  `format="console"` writes aligned, human-readable lines; `format="auto"` picks console when
  the stream is a terminal and JSON otherwise (a Pod's stdout/stderr is not a terminal).
- Levels: debug, info, warning (or warn), error, critical; also zap's numeric verbosity as
  upstream's manifests pass it (`--zap-log-level=2`): "0" is info, any higher number is debug.
- `time_encoding` picks how `ts` is written, with zap's names (upstream's `--zap-time-encoding`):
  `epoch` (seconds, float), `millis` (float), `nano` (integer), `iso8601` (milliseconds and a
  numeric offset), `rfc3339` (seconds), `rfc3339nano` (nanoseconds, trailing zeros trimmed).
  Unset keeps ISO 8601 with microseconds, UTC. Every encoding writes UTC.
- `stacktrace_level` (upstream's `--zap-stacktrace-level`: `info`, `error` or `panic`) adds the
  calling stack to every line at or above that level, as zap does; `panic` (and unset) adds it to
  none, since Python has no panic level: an exception's own traceback is always logged.
- Exceptions are logged as their type, message and traceback (file, line and function of each
  frame), never with the frames' local variables: a failed reconcile's frames hold request
  payloads and HTTP header dicts (bearer tokens), and dumping them made lines of many kilobytes
  that leaked credentials into log storage. In JSON the `exception` key is a list with one entry
  per exception of the chain (`exc_type`, `exc_value`, `frames`); on a console it is the
  standard library's traceback text.

Context for every line of a reconcile: keys bound with `structlog.contextvars` (the workers bind
`controller`, `namespace`, the object's label and `reconcile_id` around each reconcile,
runtime/workers.py) are merged into every line, including lines of libraries that log through
`logging`. Context variables belong to the current asyncio task (a task copies them when it is
created), so each worker's binding is its own.
"""

from __future__ import annotations

import datetime
import logging
import sys
import time
from typing import Any, Literal, TextIO

import orjson
import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import Processor

LogFormat = Literal["json", "console", "auto"]
TimeEncoding = Literal["epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano"]
TIME_ENCODINGS: tuple[TimeEncoding, ...] = (
    "epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano",
)  # fmt: skip
# zap's stacktrace levels, as controller-runtime's flag accepts them; "panic" is above anything
# Python logs, so it means "never".
STACKTRACE_LEVELS: dict[str, int] = {
    "info": logging.INFO,
    "error": logging.ERROR,
    "panic": logging.CRITICAL + 1,
}

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def parse_level(level: str | int) -> int:
    """A level name or zap verbosity number -> a `logging` level."""
    text = str(level).strip().lower()
    if text in _LEVELS:
        return _LEVELS[text]
    if text.isdigit():
        return logging.INFO if int(text) == 0 else logging.DEBUG
    raise ValueError(f"unknown log level {level!r} (use debug, info, warning, error or a number)")


# A log call's method name (structlog's, or a standard record's level name) -> its level.
_METHOD_LEVELS = {**_LEVELS, "exception": logging.ERROR, "fatal": logging.CRITICAL}


def _rfc3339(now: datetime.datetime, digits: int) -> str:
    """UTC time with `digits` fractional digits (0 for none), trailing zeros trimmed as Go's
    RFC3339Nano does when `digits` is 9."""
    text = now.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        nanos = f"{now.microsecond:06d}000"[:digits]
        if digits == 9:
            nanos = nanos.rstrip("0")
        if nanos:
            text += "." + nanos
    return text + "Z"


def time_stamper(encoding: TimeEncoding | None) -> Processor:
    """The processor writing `ts` in `encoding` (None: ISO 8601 with microseconds, UTC)."""
    if encoding is None:
        return structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts")
    if encoding not in TIME_ENCODINGS:
        raise ValueError(
            f"unknown time encoding {encoding!r} (use one of {', '.join(TIME_ENCODINGS)})"
        )

    def stamp(_: Any, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
        nanos = time.time_ns()
        if encoding == "epoch":
            event["ts"] = nanos / 1e9
        elif encoding == "millis":
            event["ts"] = nanos / 1e6
        elif encoding == "nano":
            event["ts"] = nanos
        else:
            now = datetime.datetime.fromtimestamp(nanos / 1e9, tz=datetime.UTC)
            digits = {"iso8601": 3, "rfc3339": 0, "rfc3339nano": 9}[encoding]
            event["ts"] = _rfc3339(now.replace(microsecond=(nanos // 1000) % 1_000_000), digits)
        return event

    return stamp


def stack_from(level: str | None) -> Processor:
    """Ask for the calling stack (`stack_info`) on lines at or above zap stacktrace `level`."""
    if level is None:
        threshold = STACKTRACE_LEVELS["panic"]
    elif level.lower() in STACKTRACE_LEVELS:
        threshold = STACKTRACE_LEVELS[level.lower()]
    else:
        raise ValueError(f"unknown stacktrace level {level!r} (use info, error or panic)")

    def mark(_: Any, method: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
        if _METHOD_LEVELS.get(method, logging.NOTSET) >= threshold:
            event.setdefault("stack_info", True)
        return event

    return mark


def _json_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


# structlog's defaults (dict_tracebacks, and rich tracebacks on a console) show every frame's
# locals; these are the same formats with the locals switched off.
_EXCEPTION_AS_DICT: Processor = structlog.processors.ExceptionRenderer(
    ExceptionDictTransformer(show_locals=False)
)


def configure_logging(
    level: str | int = "info",
    format: LogFormat = "auto",
    *,
    stream: TextIO | None = None,
    time_encoding: TimeEncoding | None = None,
    stacktrace_level: str | None = None,
) -> None:
    """Route structlog and standard library logging to `stream` (stderr) in one format.

    Raises ValueError for an unknown level, format, time encoding or stacktrace level (the
    entry point turns it into a usage error).
    """
    stream = stream if stream is not None else sys.stderr
    if format == "auto":
        format = "console" if stream.isatty() else "json"
    elif format not in ("json", "console"):
        raise ValueError(f"unknown log format {format!r} (use json, console or auto)")

    stamp, want_stack = time_stamper(time_encoding), stack_from(stacktrace_level)
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        stamp,
        want_stack,
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: list[Processor]
    if format == "json":
        renderer = [
            _EXCEPTION_AS_DICT,
            structlog.processors.EventRenamer("msg"),
            structlog.processors.JSONRenderer(serializer=_json_dumps),
        ]
    else:
        renderer = [
            structlog.dev.ConsoleRenderer(
                colors=stream.isatty(),
                timestamp_key="ts",
                exception_formatter=structlog.dev.plain_traceback,
            )
        ]

    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        )
    )
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(parse_level(level))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: loggers made at import time must follow a later (re)configuration.
        cache_logger_on_first_use=False,
    )
