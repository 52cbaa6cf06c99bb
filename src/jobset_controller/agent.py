"""The in-place restart agent (KEP-467; gate InPlaceRestart): one process in every pod of a
JobSet whose ``failurePolicy.restartStrategy`` is ``InPlaceRestart``.
See docs/behaviour.md#in-place-restart.

It watches its own JobSet only (a field selector on its name), writes its pod's
``jobset.sigs.k8s.io/in-place-restart-attempt`` annotation by server-side apply (field manager
``in-place-restart-agent``), and holds a barrier:

- on its first look at the JobSet it annotates its pod with ``currentInPlaceRestartAttempt + 1``
  (0 when unset): the attempt this run of the pod's containers belongs to;
- when its attempt is at or below ``previousInPlaceRestartAttempt`` it exits with
  ``IN_PLACE_RESTART_EXIT_CODE``: the kubelet's container restart rules then restart all of the
  pod's containers in place, and the new agent annotates the next attempt;
- when its attempt equals ``currentInPlaceRestartAttempt`` (every pod reached it: the controller's
  part) it lifts the barrier: as a native sidecar it serves ``STARTUP_PROBE_PATH`` on
  ``STARTUP_PROBE_PORT`` (the worker's startup probe), as the main container
  (``WORKER_COMMAND`` set) it runs the worker through ``$SHELL -c`` (else ``bash``) and exits with
  the worker's code;
- a JobSet annotated ``jobset.sigs.k8s.io/disable-in-place-restart``, or not using the strategy,
  lifts the barrier at once.

Environment (upstream's contract): ``JOBSET_NAME``, ``POD_NAME`` (required), ``WORKER_COMMAND``,
``STARTUP_PROBE_PATH`` (default ``/barrier-is-down``), ``STARTUP_PROBE_PORT`` (default ``8081``;
neither may be set with ``WORKER_COMMAND``), ``IN_PLACE_RESTART_EXIT_CODE`` (default ``1``); the
namespace from the ServiceAccount's namespace file. The API server is reached as the controller
reaches it (``--kubeconfig``, ``$KUBECONFIG``, else the pod's ServiceAccount).

Exit codes, as upstream's: 1 for a bad environment (one line on stderr), a probe server that
cannot listen or a worker that cannot be started; ``IN_PLACE_RESTART_EXIT_CODE`` to restart in
place; the worker's own code in main-container mode (255 when a signal ended it); 128+n on
signal n; 0 never otherwise (a sidecar runs until its pod ends).

Small by design: it runs in every pod of the largest JobSets. It imports the raw client and the
API constants, nothing of the controller (no models, no pydantic, no metrics server):
tests/unit/agent/test_agent_footprint.py checks what it loads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobset_controller.api.constants import (
    DISABLE_IN_PLACE_RESTART_KEY,
    GROUP,
    IN_PLACE_RESTART_ATTEMPT_KEY,
    PLURAL,
    VERSION,
    RestartStrategy,
)
from jobset_controller.runtime.interrupts import StopSignals, by_signal
from jobset_controller.runtime.resources import PODS, Resource

# What the agent's ServiceAccount needs, in the pod's namespace (each with why): the RBAC example
# (manifests/in-place-restart-agent, the chart's `inPlaceRestartAgent`) is generated from it.
AGENT_RULES: Final[tuple[Mapping[str, Any], ...]] = (
    # Its own JobSet: a list and a watch with a field selector on its name.
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]},
    # Its own pod's attempt annotation, by server-side apply (never a create).
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
)
# Where the agent reads its JobSet and writes its pod (paths built by `Resource.path`).
JOBSETS: Final = Resource(GROUP, VERSION, PLURAL)
NAMESPACE_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
FIELD_MANAGER: Final = "in-place-restart-agent"
DEFAULT_PROBE_PATH: Final = "/barrier-is-down"
DEFAULT_PROBE_PORT: Final = "8081"
DEFAULT_EXIT_CODE: Final = "1"
IN_PLACE_RESTART: Final = RestartStrategy.IN_PLACE_RESTART.value
# Watches end after a few minutes on the server's side; a silent one longer than this is dead.
_WATCH_SECONDS: Final = 300
_READ_TIMEOUT: Final = 330.0
_BACKOFF_START: Final = 0.1
_BACKOFF_MAX: Final = 30.0
_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


class EnvError(Exception):
    """The environment cannot run the agent (one line, exit 1)."""


@dataclass(frozen=True)
class Env:
    """The agent's configuration, read once at start (module docstring)."""

    namespace: str
    jobset_name: str
    pod_name: str
    exit_code: int
    worker_command: str = ""
    probe_path: str = DEFAULT_PROBE_PATH
    probe_port: int = int(DEFAULT_PROBE_PORT)

    @property
    def sidecar(self) -> bool:
        return not self.worker_command


def read_env(environ: Mapping[str, str], namespace_file: str = NAMESPACE_FILE) -> Env:
    """The configuration from ``environ`` and the namespace file, or EnvError naming the problem."""
    try:
        with open(namespace_file, encoding="utf-8") as file:
            namespace = file.read().strip()
    except OSError as error:
        raise EnvError(
            f"cannot read the namespace file {namespace_file} ({error.strerror}): is "
            "automountServiceAccountToken false on the pod or its ServiceAccount?"
        ) from None
    if not namespace:
        raise EnvError(f"the namespace file {namespace_file} is empty")
    jobset_name = _required(environ, "JOBSET_NAME")
    pod_name = _required(environ, "POD_NAME")
    raw_code = environ.get("IN_PLACE_RESTART_EXIT_CODE") or DEFAULT_EXIT_CODE
    if not _DECIMAL.fullmatch(raw_code):
        raise EnvError(f"IN_PLACE_RESTART_EXIT_CODE must be an integer, got {raw_code!r}")
    worker = environ.get("WORKER_COMMAND", "")
    path = environ.get("STARTUP_PROBE_PATH", "")
    port = environ.get("STARTUP_PROBE_PORT", "")
    if worker and (path or port):
        raise EnvError("WORKER_COMMAND cannot be set with STARTUP_PROBE_PATH or STARTUP_PROBE_PORT")
    if worker:
        return Env(namespace, jobset_name, pod_name, int(raw_code), worker_command=worker)
    port = port or DEFAULT_PROBE_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise EnvError(f"STARTUP_PROBE_PORT must be a port number, got {port!r}")
    return Env(
        namespace,
        jobset_name,
        pod_name,
        int(raw_code),
        probe_path=path or DEFAULT_PROBE_PATH,
        probe_port=int(port),
    )


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise EnvError(f"environment variable {name} must be set")
    return value


# ------------------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class Annotate:
    """Apply the pod's attempt annotation, then decide again."""

    attempt: int


@dataclass(frozen=True)
class Exit:
    """Exit with ``code`` (the in-place restart exit code)."""

    code: int


@dataclass(frozen=True)
class Lift:
    """Lift the barrier: serve the probe endpoint, or run the worker."""


Action = Annotate | Exit | Lift | None


def bypasses_barrier(jobset: Mapping[str, Any]) -> bool:
    """The JobSet disables in-place restart, or does not use the strategy."""
    annotations = (jobset.get("metadata") or {}).get("annotations") or {}
    if DISABLE_IN_PLACE_RESTART_KEY in annotations:
        return True
    policy = (jobset.get("spec") or {}).get("failurePolicy") or {}
    return bool(policy.get("restartStrategy") != IN_PLACE_RESTART)


def _status_int(jobset: Mapping[str, Any], key: str) -> int | None:
    value = (jobset.get("status") or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def decide(
    jobset: Mapping[str, Any], attempt: int | None, barrier_active: bool, exit_code: int
) -> Action:
    """The agent's next step for this look at its JobSet (module docstring), as upstream's."""
    if bypasses_barrier(jobset):
        return Lift() if barrier_active else None
    current = _status_int(jobset, "currentInPlaceRestartAttempt")
    previous = _status_int(jobset, "previousInPlaceRestartAttempt")
    if attempt is None:
        return Annotate(0 if current is None else current + 1)
    if previous is not None and attempt <= previous:
        return Exit(exit_code)
    if barrier_active and attempt == current:
        return Lift()
    return None


def annotation_patch(env: Env, attempt: int) -> dict[str, Any]:
    """The server-side apply body of the pod's attempt annotation."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": env.pod_name,
            "namespace": env.namespace,
            "annotations": {IN_PLACE_RESTART_ATTEMPT_KEY: str(attempt)},
        },
    }


# ------------------------------------------------------------------------------- the process
def log(message: str, **fields: object) -> None:
    """One line on stderr: time, message, key=value pairs."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    extra = "".join(f" {key}={value!r}" for key, value in fields.items())
    print(f"{stamp} in-place-restart-agent: {message}{extra}", file=sys.stderr, flush=True)


class Agent:
    """The barrier of one pod (module docstring). ``run`` returns the process's exit code."""

    def __init__(self, env: Env, client: Any) -> None:
        self.env = env
        self.client = client
        self.attempt: int | None = None
        self.barrier_active = True
        self.exit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._worker: asyncio.subprocess.Process | None = None

    def finish(self, code: int) -> None:
        if not self.exit_code.done():
            self.exit_code.set_result(code)

    async def run(self) -> int:
        watch = asyncio.create_task(self._watch_forever())
        try:
            return await self.exit_code
        finally:
            watch.cancel()
            for task in list(self._tasks):
                task.cancel()
            await self._stop_worker()
            if self._server is not None:
                self._server.close()

    # -- the JobSet
    def _jobsets_path(self) -> str:
        return JOBSETS.path(self.env.namespace)

    async def _watch_forever(self) -> None:
        delay = _BACKOFF_START
        selector = f"metadata.name={self.env.jobset_name}"
        while True:
            try:
                listed = await self.client.get(self._jobsets_path(), fieldSelector=selector)
                version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                for item in listed.get("items") or ():
                    await self.reconcile(item)
                delay = _BACKOFF_START
                while True:
                    params = {
                        "fieldSelector": selector,
                        "resourceVersion": version,
                        "allowWatchBookmarks": True,
                        "timeoutSeconds": _WATCH_SECONDS,
                    }
                    async for event in self.client.watch(
                        self._jobsets_path(), params=params, read_timeout=_READ_TIMEOUT
                    ):
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            raise _Relist(str(obj.get("message") or "watch error"))
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                        if kind in ("ADDED", "MODIFIED"):
                            await self.reconcile(obj)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log("watching the JobSet failed; retrying", error=str(error), after=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX)

    async def reconcile(self, jobset: Mapping[str, Any]) -> None:
        """Act on one look at the JobSet until nothing is left to do (a failed apply raises:
        the watch loop retries it after its backoff)."""
        while True:
            action = decide(jobset, self.attempt, self.barrier_active, self.env.exit_code)
            if isinstance(action, Annotate):
                path = PODS.path(self.env.namespace, self.env.pod_name)
                await self.client.apply(
                    path, annotation_patch(self.env, action.attempt), field_manager=FIELD_MANAGER
                )
                self.attempt = action.attempt
                log("pod annotated", attempt=action.attempt)
                continue
            if isinstance(action, Exit):
                log("exiting to restart this pod in place", exit_code=action.code)
                self.finish(action.code)
            elif isinstance(action, Lift):
                self.barrier_active = False
                log("lifting the barrier", attempt=self.attempt)
                self._start(self._serve_probe() if self.env.sidecar else self._run_worker())
            return

    def _start(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- lifting the barrier
    async def _serve_probe(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._answer, host=None, port=self.env.probe_port, reuse_address=True
            )
        except OSError as error:
            log("the startup probe server cannot listen", error=str(error))
            self.finish(1)
            return
        log("serving the startup probe", path=self.env.probe_path, port=self.env.probe_port)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            request = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            target = request[1].split("?", 1)[0] if len(request) > 1 else ""
            found = target == self.env.probe_path
            status = b"200 OK" if found else b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n")
            writer.write(b"Connection: close\r\n\r\n")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _run_worker(self) -> None:
        shell = os.environ.get("SHELL") or shutil.which("bash")
        if not shell:
            log("no shell to run WORKER_COMMAND ($SHELL unset, no bash on PATH)")
            self.finish(1)
            return
        log("running the worker", command=self.env.worker_command)
        try:
            self._worker = await asyncio.create_subprocess_exec(
                shell, "-c", self.env.worker_command
            )
        except OSError as error:
            log("the worker cannot be started", error=str(error))
            self.finish(1)
            return
        code = await self._worker.wait()
        log("the worker ended", exit_code=code)
        self.finish(255 if code < 0 else code)

    async def _stop_worker(self) -> None:
        worker = self._worker
        if worker is not None and worker.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
            await worker.wait()


class _Relist(Exception):
    """The watch must start again from a fresh list."""


async def _main(env: Env, kubeconfig: str | None, stops: StopSignals) -> int:
    """Signals first (one received while connecting ends the agent with 128+n at once), then
    the client and the agent's run."""
    from jobset_controller.runtime.client import ClientSettings, KubeClient

    main = asyncio.current_task()
    agent: Agent | None = None

    def on_signal(signum: int) -> None:
        log("signal received, shutting down", signal=signal.Signals(signum).name)
        if agent is None:
            assert main is not None
            main.cancel()  # still connecting
        else:
            agent.finish(by_signal(signum))

    stops.attach(on_signal)
    settings = ClientSettings(user_agent="in-place-restart-agent", request_timeout=30.0)
    try:
        client = await KubeClient.connect(kubeconfig=kubeconfig, settings=settings)
    except asyncio.CancelledError:
        if stops.received is None:
            raise
        return by_signal(stops.received)
    try:
        agent = Agent(env, client)
        if stops.received is not None:
            agent.finish(by_signal(stops.received))
        return await agent.run()
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None, *, stops: StopSignals | None = None) -> int:
    """``in-place-restart-agent`` / ``jobset-controller agent``: exit code as the module says."""
    parser = argparse.ArgumentParser(
        prog="in-place-restart-agent",
        description="The in-place restart agent of a JobSet pod (KEP-467).",
    )
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument(
        "--namespace-file",
        default=NAMESPACE_FILE,
        help="where the pod's namespace is read (default: the ServiceAccount's)",
    )
    args = parser.parse_args(argv)
    stops = stops or StopSignals()
    stops.exit_with(by_signal)  # 128+n, at once until the loop runs, as the docstring says
    try:
        env = read_env(os.environ, args.namespace_file)
    except EnvError as error:
        print(f"in-place-restart-agent: {error}", file=sys.stderr)
        return 1
    mode = "sidecar" if env.sidecar else "main container"
    log("starting", jobset=env.jobset_name, pod=env.pod_name, mode=mode)
    try:
        return asyncio.run(_main(env, args.kubeconfig, stops))
    except Exception as error:
        print(f"in-place-restart-agent: {error}", file=sys.stderr)
        return 1
