"""The open-files limit raised at start, as Go programs do.

Why: every connection to the webhook, metrics and health ports and every API connection is a
file descriptor, and the soft RLIMIT_NOFILE a container starts with is often 1024 while the hard
limit is far higher (the runtime's default, 1048576 or 524288). Go's runtime raises the soft limit
to the hard one when a program starts (os package, since Go 1.19), so upstream's controller
(controller-runtime's manager) has the hard limit to spend; we do the same, once, and log both
numbers so an operator sees what the process may open. Only the soft limit moves: raising the hard
one needs privileges a restricted pod does not have.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("rlimit")

_NR_OPEN = Path("/proc/sys/fs/nr_open")  # Linux's ceiling for a finite RLIMIT_NOFILE


@dataclass(frozen=True, slots=True)
class OpenFilesLimit:
    """The soft limit before and after, and the hard limit (``resource.RLIM_INFINITY`` = -1)."""

    before: int
    soft: int
    hard: int


def raise_open_files_limit() -> OpenFilesLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit and log both; never raises.

    An unlimited hard limit is not a value the soft one may take on Linux: then the soft limit
    goes to ``/proc/sys/fs/nr_open`` (the kernel's ceiling). A refusal leaves the limit as it was
    (logged): the process still runs, with fewer connections.
    """
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = before
    soft = before
    if before != resource.RLIM_INFINITY and target > before:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as error:
            log.warning(
                "cannot raise the open files limit",
                soft=before,
                hard=hard,
                wanted=target,
                error=str(error),
            )
    log.info("open files limit", soft=soft, hard=hard, soft_at_start=before)
    return OpenFilesLimit(before=before, soft=soft, hard=hard)
