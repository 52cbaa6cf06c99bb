"""Structured logging: JSON lines in a cluster, readable lines in a terminal.

`configure_logging(level, format)` is called once by the entry point. After it:

- Every record goes through the standard library's root logger and one handler, so structlog
  loggers (`structlog.get_logger("informer")`) and plain `logging` users (aiohttp, kubernetes)
  come out in the same format, filtered by the same level.
- `format="json"` writes one JSON object per line with `ts` (ISO 8601, UTC), `level`, `logger`,
  `msg` and the event's key/values (zap's key names, as upstream's JSON logs use);
  `format="console"` writes aligned, human-readable lines; `format="auto"` picks console when
  the stream is a terminal and JSON otherwise (a Pod's stdout/stderr is not a terminal).
- Levels: debug, info, warning (or warn), error, critical; also zap's numeric verbosity as
  upstream's manifests pass it (`--zap-log-level=2`): "0" is info, any higher number is debug.
- Exceptions are logged as their type, message and traceback (file, line and function of each
  frame), never with the frames' local variables: a failed reconcile's frames hold request
  payloads and HTTP header dicts (bearer tokens), and dumping them made lines of many kilobytes
  that leaked credentials into log storage. In JSON the `exception` key is a list with one entry
  per exception of the chain (`exc_type`, `exc_value`, `frames`); on a console it is the
  standard library's traceback text.

Context for every line of a reconcile: `reconcile_context(jobset=..., namespace=...)` binds
`jobset`, `namespace` and `reconcile_id` with `structlog.contextvars`. Context variables belong
to the current asyncio task (a task copies them when it is created), so each worker's binding is
its own and every log line inside the block carries the keys, including lines of libraries
that log through `logging`. The block resets the keys when it ends.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TextIO

import orjson
import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import Processor

LogFormat = Literal["json", "console", "auto"]

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


def _json_dumps(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=str).decode()


# structlog's defaults (dict_tracebacks, and rich tracebacks on a console) show every frame's
# locals; these are the same formats with the locals switched off.
_EXCEPTION_AS_DICT: Processor = structlog.processors.ExceptionRenderer(
    ExceptionDictTransformer(show_locals=False)
)


def configure_logging(
    level: str | int = "info", format: LogFormat = "auto", *, stream: TextIO | None = None
) -> None:
    """Route structlog and standard library logging to `stream` (stderr) in one format."""
    stream = stream if stream is not None else sys.stderr
    if format == "auto":
        format = "console" if stream.isatty() else "json"
    elif format not in ("json", "console"):
        raise ValueError(f"unknown log format {format!r} (use json, console or auto)")

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
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


@contextmanager
def reconcile_context(
    *, jobset: str, namespace: str, reconcile_id: str | None = None
) -> Iterator[str]:
    """Bind `jobset`, `namespace` and `reconcile_id` to every log line in the block.

    Yields the reconcile id (a new UUID unless one is given, as controller-runtime's
    reconcileID). Use it inside the worker task that runs the reconcile.
    """
    reconcile_id = reconcile_id or str(uuid.uuid4())
    tokens = structlog.contextvars.bind_contextvars(
        jobset=jobset, namespace=namespace, reconcile_id=reconcile_id
    )
    try:
        yield reconcile_id
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
