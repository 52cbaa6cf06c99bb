"""The installed commands (`jobset-controller`, `kubectl-jobset`, `in-place-restart-agent`).

Why a module of its own: each command takes SIGINT and SIGTERM before it imports anything else
(runtime/interrupts.py), so a signal that lands while the rest loads is acted on once the command
runs, not lost or turned into a traceback. `cli` and `agent` are imported only after that.
"""

from __future__ import annotations

from typing import NoReturn

from jobset_controller.runtime.interrupts import StopSignals


def jobset_controller() -> NoReturn:
    stops = StopSignals().install()
    from jobset_controller.cli import main

    raise SystemExit(main(stops=stops))


def kubectl_jobset() -> NoReturn:
    stops = StopSignals().install()
    from jobset_controller.cli import main

    raise SystemExit(main(prog="kubectl jobset", stops=stops))


def in_place_restart_agent() -> NoReturn:
    stops = StopSignals().install()
    from jobset_controller import agent

    raise SystemExit(agent.main(stops=stops))
