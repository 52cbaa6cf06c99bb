"""Child processes that cannot outlive the Python process that started them.

A test run that is interrupted, or a harness that crashes, must not leave an etcd or an apiserver
running (the next run would find its ports and data dirs in a strange state). Three layers make
sure of it: an explicit stop (terminate, wait, then kill), an atexit hook for forgotten stops, and
on Linux the kernel's parent-death signal, which kills the child even when Python dies by SIGKILL.

Caveat of that signal: it fires when the THREAD that started the child exits, so start processes
from a long-lived thread (the main thread), never from a worker such as `asyncio.to_thread`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable
from pathlib import Path

from jobset_controller_dev.envtest.polling import scaled

_PR_SET_PDEATHSIG = 1
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (/proc/<pid>/stat; OSError once it
    is gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def process_rss(pid: int) -> int:
    """Resident bytes of process `pid` now (/proc/<pid>/statm; OSError once it is gone)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


def process_peak_rss(pid: int) -> int:
    """The most bytes process `pid` has held resident (VmHWM of /proc/<pid>/status; OSError
    once it is gone): a controller's peak is its initial list, which a reading at rest misses."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def parent_death_signal() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return arm


_live: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()


def _stop_all() -> None:
    for proc in list(_live):
        proc.stop()


atexit.register(_stop_all)


class ManagedProcess:
    """One long-running binary with its output in a log file."""

    def __init__(
        self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None
    ):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._env = env
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                preexec_fn=parent_death_signal(),
            )
        finally:
            log.close()
        _live.add(self)

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate, wait up to `timeout` s (scaled: `polling.scaled`; a busy machine shuts down
        slower, and a kill it did not need would cost the clean stop), then kill. Safe to call
        twice."""
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            popen.terminate()
            try:
                popen.wait(scaled(timeout))
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        self._popen = None
        _live.discard(self)

    def kill(self) -> None:
        """SIGKILL without grace, to simulate a crash."""
        if self._popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._popen.pid, signal.SIGKILL)
            self._popen.wait()
            self._popen = None
            _live.discard(self)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# Ports `free_port` has handed out in this process. The kernel may offer a port again as soon as
# the probing socket is closed, so two calls made before either port is bound (a test picking a
# webhook port, then a controller picking its health port) could get the same one; seen once in
# CI: the health server took the webhook's port and the API server got plain HTTP back.
_HANDED_OUT: set[int] = set()
# Below this, ports are the workers' own (see _worker_ports); the kernel's ephemeral range starts
# at or above it on every Linux default (32768), so no port the kernel picks for a bind(0) or an
# outgoing connection can be one a worker handed out.
_WORKER_PORTS_FROM = 10000
_next_in_slice = 0


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_ports() -> range | None:
    """This pytest-xdist worker's own slice of ports, or None outside a parallel run.

    Why: the suite's workers are separate processes, each with its own `_HANDED_OUT`; two of
    them probing bind(0) can be given the same port before either binds it (one process's
    memory cannot rule that out). Disjoint slices below the kernel's ephemeral range can."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or count < 1:
        return None
    index = int(worker[2:])
    size = (_ephemeral_low() - _WORKER_PORTS_FROM) // count
    if size < 100:  # a machine whose ephemeral range starts low: the kernel's ports it is
        return None
    start = _WORKER_PORTS_FROM + index * size
    return range(start, start + size)


def _probe(port: int) -> int | None:
    """`port` if a listener could bind it on 127.0.0.1 right now (0: any), else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
        bound: int = sock.getsockname()[1]
        return bound


def free_port() -> int:
    """A loopback port free right now and never handed out before by this process (another
    process could still take it before we bind). In a parallel run (pytest-xdist), a port of
    this worker's own slice, so no other worker hands it out too."""
    global _next_in_slice
    ports = _worker_ports()
    if ports is None:
        while True:
            port = _probe(0)
            if port is not None and port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    for _ in range(2 * len(ports)):  # round the slice: a port handed out early may be free again
        candidate = ports[_next_in_slice % len(ports)]
        _next_in_slice += 1
        if candidate in _HANDED_OUT and _next_in_slice <= len(ports):
            continue
        if _probe(candidate) is not None:
            _HANDED_OUT.add(candidate)
            return candidate
    raise RuntimeError(f"no free port in this worker's slice {ports.start}-{ports.stop - 1}")


def health_status(port: int, path: str) -> int:
    """The HTTP status of `path` on the health probe server at 127.0.0.1:`port`; 0 when nothing
    answers (within 5 s, scaled: a busy machine answers late, not wrong)."""
    try:
        url = f"http://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(url, timeout=scaled(5)) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def wait_healthy(
    port: int,
    *,
    running: Callable[[], bool],
    exited: Callable[[], Exception],
    late: Callable[[str], Exception],
    within: float,
    interval: float = 0.1,
    path: str = "/readyz",
) -> None:
    """Poll `path` on the health probe server at 127.0.0.1:`port` every `interval` s until it
    answers 200. Raise `exited()` if `running()` turns false first, `late(seen)` once `within` s
    (scaled: `polling.scaled`, here and nowhere else) have passed, `seen` saying what was waited
    on and the last answer: each caller names its own errors."""
    deadline = time.monotonic() + scaled(within)
    while (status := health_status(port, path)) != 200:
        if not running():
            raise exited()
        if time.monotonic() > deadline:
            answer = f"HTTP {status}" if status else "no answer"
            raise late(f"{path} on port {port} not 200 within {scaled(within):g} s ({answer})")
        time.sleep(interval)


def processes_mentioning(marker: str) -> list[int]:
    """PIDs whose command line contains `marker` (used to prove nothing was left behind)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found
