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

Built on the controller's runtime: the API client, the informer (its watch of the JobSet), the
HTTP/1.1 server (the startup probe) and the structured logs are the controller's own pieces. Small
by design, since it runs in every pod of the largest JobSets: it loads nothing of the controller
above the runtime (no models, no pydantic, no reconcile, no metrics server), which
tests/unit/agent/test_agent_footprint.py checks; hack/bench/agent_bench.py measures its start
and memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import signal
import sys
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from jobset_controller.api.constants import (
    DISABLE_IN_PLACE_RESTART_KEY,
    GROUP,
    IN_PLACE_RESTART_ATTEMPT_KEY,
    PLURAL,
    VERSION,
    RestartStrategy,
)
from jobset_controller.runtime.client import ClientSettings, KubeClient
from jobset_controller.runtime.clock import Clock, RandomSource, RealClock
from jobset_controller.runtime.http1server import HttpServer, Reply, Request, not_found
from jobset_controller.runtime.informer import Handlers, Informer
from jobset_controller.runtime.interrupts import StopSignals, by_signal
from jobset_controller.runtime.logging import configure_logging
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
# A watch silent longer than this (no event, no bookmark) is re-opened (runtime/informer.py).
_READ_TIMEOUT: Final = 330.0
# A failed action's back-off: doubling from the first to the cap, each wait in [d, 2d).
_BACKOFF_INITIAL: Final = 0.8
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
_log = structlog.get_logger("in-place-restart-agent")


def log(message: str, **fields: object) -> None:
    """One structured line on stderr (runtime/logging.py: JSON in a pod, readable on a terminal)."""
    _log.info(message, **fields)


class Agent:
    """The barrier of one pod (module docstring). ``run`` returns the process's exit code.

    The JobSet is watched by the controller's own informer (runtime/informer.py: LIST then WATCH
    with a field selector on the name, bookmarks, relists on expiry, jittered back-off); its
    handlers only flag a change, and one loop acts on the latest cached JobSet, so a burst of
    events costs one decision. An action that fails (the annotation's apply) is tried again on
    the same jittered back-off as the informer's, measured on the same clock."""

    def __init__(
        self,
        env: Env,
        client: KubeClient,
        *,
        clock: Clock | None = None,
        rng: RandomSource = random,
    ) -> None:
        self.env = env
        self.client = client
        self.attempt: int | None = None
        self.barrier_active = True
        self.exit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._clock: Clock = clock or RealClock()
        self._rng = rng
        self._changed = asyncio.Event()
        self._key = f"{env.namespace}/{env.jobset_name}"
        self.informer = Informer(
            client,
            JOBSETS,
            namespace=env.namespace,
            field_selector=f"metadata.name={env.jobset_name}",
            handlers=Handlers(on_add=self._flag, on_update=lambda old, new: self._flag(new)),
            read_timeout=_READ_TIMEOUT,
            clock=self._clock,
            rng=rng,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: HttpServer | None = None
        self._worker: asyncio.subprocess.Process | None = None

    def finish(self, code: int) -> None:
        if not self.exit_code.done():
            self.exit_code.set_result(code)

    async def run(self) -> int:
        watching = [asyncio.create_task(self.informer.run()), asyncio.create_task(self._follow())]
        try:
            return await self.exit_code
        finally:
            for task in [*watching, *self._tasks]:
                task.cancel()
            await asyncio.gather(*watching, *self._tasks, return_exceptions=True)
            await self._stop_worker()
            if self._server is not None:
                await self._server.stop()

    # -- the JobSet
    def _flag(self, jobset: Mapping[str, Any]) -> None:
        self._changed.set()

    async def _follow(self) -> None:
        """Act on the cached JobSet after every change the informer delivers (class docstring)."""
        delay = _BACKOFF_INITIAL
        while True:
            await self._changed.wait()
            self._changed.clear()
            jobset = self.informer.store.get(self._key)
            if jobset is None:
                continue
            try:
                await self.reconcile(jobset)
                delay = _BACKOFF_INITIAL
            except asyncio.CancelledError:
                raise
            except Exception as error:
                wait = delay * (1 + self._rng.random())
                log("acting on the JobSet failed; retrying", error=str(error), after=round(wait, 3))
                await self._clock.sleep(wait)
                delay = min(delay * 2, _BACKOFF_MAX)
                self._changed.set()

    async def reconcile(self, jobset: Mapping[str, Any]) -> None:
        """Act on one look at the JobSet until nothing is left to do (a failed apply raises:
        `_follow` tries again after its back-off)."""
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

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- lifting the barrier
    async def _serve_probe(self) -> None:
        """The startup probe on the controller's HTTP server (runtime/http1server.py): 200 on
        the probe path for any method, as upstream's handler answers, 404 elsewhere."""
        server = HttpServer({}, name="startup-probe", fallback=self._answer)
        try:
            await server.start(None, self.env.probe_port)
        except OSError as error:
            log("the startup probe server cannot listen", error=str(error))
            self.finish(1)
            return
        self._server = server
        log("serving the startup probe", path=self.env.probe_path, port=self.env.probe_port)

    async def _answer(self, request: Request) -> Reply:
        if request.path == self.env.probe_path:
            return Reply()
        return await not_found(request)

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


async def _main(env: Env, kubeconfig: str | None, stops: StopSignals) -> int:
    """Signals first (one received while connecting ends the agent with 128+n at once), then
    the client and the agent's run."""
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
    configure_logging("info", "auto")
    mode = "sidecar" if env.sidecar else "main container"
    log("starting", jobset=env.jobset_name, pod=env.pod_name, mode=mode)
    try:
        return asyncio.run(_main(env, args.kubeconfig, stops))
    except Exception as error:
        print(f"in-place-restart-agent: {error}", file=sys.stderr)
        return 1
