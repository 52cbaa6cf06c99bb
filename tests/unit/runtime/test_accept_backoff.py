"""Out of file descriptors, the server backs off, logs one line per episode, keeps serving the
connections it has and accepts again once descriptors are free; the open-files limit is raised
to the hard one at start.

Each case runs in a subprocess: lowering RLIMIT_NOFILE in the test process would starve pytest.
The server in the child lowers its own limit when asked (``/limit?n=``, over a connection it has
already accepted) so the test decides exactly how many more connections fit.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

CHILD = r"""
import asyncio, errno, os, resource, sys
from jobset_controller.runtime.http1server import ACCEPT_ERRORS, HttpServer, Reply
from jobset_controller.runtime.logging import configure_logging

configure_logging("info", "json", stream=sys.stdout)

async def ok(request):
    return Reply.text("ok\n")

async def limit(request):
    free = int(request.query.partition("=")[2])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened = len(os.listdir("/proc/self/fd")) - 1  # less listdir's own descriptor
    resource.setrlimit(resource.RLIMIT_NOFILE, (opened + free, hard))
    return Reply.text("set\n")

async def errors(request):
    return Reply.text(f"{ACCEPT_ERRORS.value('health', errno.EMFILE)}\n")

async def main():
    server = HttpServer(
        {"/healthz": {"GET": ok}, "/limit": {"GET": limit}, "/errors": {"GET": errors}},
        name="health",
    )
    await server.start("127.0.0.1", 0)
    print(f"port {server.port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes
    await server.stop()

asyncio.run(main())
"""

DEADLINE = 20.0


class Child:
    """The server process and its stdout, read line by line with a deadline (never a sleep)."""

    def __init__(self, code: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        self._out = self.process.stdout.fileno()
        self._pending = b""
        self.lines: list[str] = []

    def line(self, timeout: float = DEADLINE) -> str:
        end = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = end - time.monotonic()
            assert left > 0, f"no line from the child; so far: {self.lines}"
            ready, _, _ = select.select([self._out], [], [], left)
            if ready:
                chunk = os.read(self._out, 65536)
                assert chunk, f"the child ended; so far: {self.lines}"
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        self.lines.append(line.decode())
        return self.lines[-1]

    def finish(self) -> tuple[list[str], str]:
        """Close stdin (the child stops its server and exits); every line and stderr."""
        out, err = self.process.communicate(b"", timeout=DEADLINE)
        self.lines += (self._pending + out).decode().splitlines()
        return self.lines, err.decode()


def get(sock: socket.socket, path: str) -> bytes:
    """One keep-alive GET on ``sock``: the body of the answer (bodies here are one short line)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while not data.endswith(b"\n") or b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    return sock


def logged(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_out_of_descriptors_backs_off_logs_once_and_serves_throughout() -> None:
    child = Child(CHILD)
    try:
        port = int(child.line().split()[1])
        first = connect(port)
        assert get(first, "/healthz") == b"ok\n"
        assert get(first, "/limit?n=2") == b"set\n"
        # Two more fit; the third waits in the listen queue while accept() fails with EMFILE.
        fitting = [connect(port) for _ in range(2)]
        for sock in fitting:
            assert get(sock, "/healthz") == b"ok\n"
        waiting = connect(port)
        waiting.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        end = time.monotonic() + DEADLINE
        # The connection already open is served all along; wait for a few refused accepts.
        while int(get(first, "/errors")) < 3:
            assert time.monotonic() < end, "accept never refused"
        assert not any("accept refused" in line for line in child.lines)
        for sock in fitting:
            sock.close()  # two descriptors free again: the waiting client is accepted
        waiting.settimeout(DEADLINE)
        answer = waiting.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        refused = int(get(first, "/errors"))
        waiting.close()
        first.close()
    finally:
        lines, err = child.finish()
    episodes = [entry for entry in logged(lines) if "accept refused" in entry.get("msg", "")]
    assert len(episodes) == 1, lines
    assert episodes[0]["errno"] == "EMFILE"
    assert episodes[0]["refused"] == refused >= 3
    assert episodes[0]["server"] == "health"
    assert "Traceback" not in err + "\n".join(lines)
    assert "out of system resource" not in err + "\n".join(lines)


RAISE = r"""
import json, resource, sys
from jobset_controller.runtime.logging import configure_logging
from jobset_controller.runtime.rlimit import raise_open_files_limit

configure_logging("info", "json", stream=sys.stdout)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
limit = raise_open_files_limit()
print(json.dumps({"result": [limit.before, limit.soft, limit.hard],
                  "now": list(resource.getrlimit(resource.RLIMIT_NOFILE))}))
"""


def test_the_soft_open_files_limit_is_raised_to_the_hard_one_and_logged() -> None:
    child = Child(RAISE)
    lines, err = child.finish()
    assert child.process.returncode == 0, err
    entries = logged(lines)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = hard if hard != resource.RLIM_INFINITY else entries[-1]["now"][0]
    assert entries[-1]["result"] == [64, expected, hard]
    assert entries[-1]["now"] == [expected, hard]
    (line,) = [entry for entry in entries if entry.get("msg") == "open files limit"]
    assert (line["soft"], line["hard"], line["soft_at_start"]) == (expected, hard, 64)


def test_the_accept_errors_counter_is_exported_under_its_name() -> None:
    import errno

    from prometheus_client import CollectorRegistry, generate_latest

    from jobset_controller.runtime.http1server import AcceptErrors
    from jobset_controller.runtime.metrics_and_health import AcceptErrorsCollector

    errors = AcceptErrors()
    registry = CollectorRegistry()
    registry.register(AcceptErrorsCollector(errors))
    errors.inc("webhook", errno.EMFILE)
    errors.inc("webhook", errno.EMFILE)
    errors.inc("metrics", errno.ENOBUFS)
    text = generate_latest(registry).decode()
    assert 'jobset_server_accept_errors_total{errno="EMFILE",server="webhook"} 2.0' in text
    assert 'jobset_server_accept_errors_total{errno="ENOBUFS",server="metrics"} 1.0' in text
    assert errors.value("webhook", errno.EMFILE) == 2


def test_a_registry_takes_the_accept_errors_collector_once() -> None:
    """Two managers on one registry: the second registration is refused (the manager ignores
    the refusal), so the family is exported once."""
    from prometheus_client import CollectorRegistry

    from jobset_controller.runtime.http1server import AcceptErrors
    from jobset_controller.runtime.metrics_and_health import AcceptErrorsCollector

    errors = AcceptErrors()
    registry = CollectorRegistry()
    registry.register(AcceptErrorsCollector(errors))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(AcceptErrorsCollector(errors))
