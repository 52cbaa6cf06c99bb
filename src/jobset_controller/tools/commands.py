"""The ``plan`` and ``status`` commands: their flags and their runs, which ``cli`` wires in.

Why here and not in ``cli``: ``cli`` owns the program's command table and its exit-code
conventions; the tools' flags and the little I/O around the pure modules belong with the tools.
Exit codes follow ``cli``: 0 success, 1 a checked failure (an invalid JobSet, a JobSet not
found, an API error), 2 bad usage (a flag, a file, a kubeconfig).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from jobset_controller.runtime.interrupts import StopSignals
from jobset_controller.runtime.output import AwaitedOutput
from jobset_controller.tools.kubectl_context import KubeconfigError, Target, load

if TYPE_CHECKING:
    from jobset_controller.api import FeatureGates
    from jobset_controller.tools.plan import Simulation

CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"


def add_plan_parser(commands: Any) -> None:
    plan = commands.add_parser(
        "plan",
        help="show what the controller would create for JobSet manifests (offline)",
        description=(
            "Default and validate JobSet manifests, then run the controller's reconcile on an "
            "empty cluster and print the Service, claims and Jobs it would create, pass by pass."
        ),
    )
    plan.add_argument("files", nargs="+", type=Path)
    plan.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text")
    plan.add_argument(
        "-n", "--namespace", default="default", help="namespace of JobSets that name none"
    )
    plan.add_argument(
        "--feature-gates",
        default="",
        help="comma-separated Gate=true|false, as in the Configuration file's featureGates",
    )
    plan.add_argument(
        "--defer-children",
        action="store_true",
        help="as the Configuration's deferredChildren.enable: a suspended JobSet that never ran "
        "gets its Jobs and Service at its first resume",
    )


def add_status_parser(commands: Any) -> None:
    status = commands.add_parser(
        "status",
        help="a JobSet's replicatedJobs, Jobs, pods, conditions, events and a diagnosis",
        description="Show JobSets as a tree, with a one-line diagnosis where one is obvious.",
    )
    status.add_argument("name", nargs="?", help="the JobSet (default: every JobSet)")
    status.add_argument("-n", "--namespace", default=None, help="default: the context's")
    status.add_argument("--context", default=None, help="kubeconfig context to use")
    status.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    status.add_argument("-w", "--watch", action="store_true", help="refresh in place")
    status.add_argument("--interval", type=float, default=2.0, help="--watch period in seconds")
    status.add_argument("--events", type=int, default=8, help="how many recent events to show")


def run_plan(args: argparse.Namespace, gates: FeatureGates, out: TextIO | None = None) -> int:
    """Judge every file like ``validate``; simulate the valid JobSets; print them."""
    # Imported here: every start of the controller builds this command's flags, none needs these.
    from jobset_controller.tools.documents import UnreadableFile, judge_files
    from jobset_controller.tools.plan import simulate
    from jobset_controller.tools.plan_render import render_json, render_text, render_yaml

    out = out or sys.stdout
    simulations: list[Simulation] = []
    failures = 0
    now = datetime.now(UTC)

    def uncheckable(line: str) -> None:
        nonlocal failures
        print(line, file=sys.stderr)
        failures += 1

    try:
        for judged in judge_files(args.files, gates, uncheckable=uncheckable):
            for line in judged.error_lines():
                print(line, file=sys.stderr)
            if judged.check.jobset is None:
                failures += 1
                continue
            simulations.append(
                simulate(
                    judged.check.jobset,
                    namespace=args.namespace,
                    now=now,
                    features=gates,
                    defer_children=bool(getattr(args, "defer_children", False)),
                )
            )
    except UnreadableFile as error:
        print(error, file=sys.stderr)
        return 2
    if args.output == "yaml":
        out.write(render_yaml(simulations))
    elif args.output == "json":
        out.write(render_json(simulations))
    else:
        out.write("\n".join(render_text(simulation) for simulation in simulations))
    return 1 if failures else 0


def run_status(
    args: argparse.Namespace, out: TextIO | None = None, *, stops: StopSignals | None = None
) -> int:
    """Resolve the target as kubectl would, then print (or keep refreshing) the tree.

    SIGINT or SIGTERM ends it (`stops`, installed by the command line at its start): exit 0,
    within the time it takes to close the connection, wherever the signal lands (connecting,
    mid-request, between frames, or while a reader that stopped reading holds a frame)."""
    from jobset_controller.tools.documents import is_utf8, one_line

    out = out or sys.stdout
    stops = stops or StopSignals()
    stops.exit_with(0)  # the watch ended as asked; before the loop runs, at once
    if args.interval <= 0:
        print("jobset-controller: --interval: must be positive", file=sys.stderr)
        return 2
    for what, value in (
        ("name", args.name),
        ("--namespace", args.namespace),
        ("--context", args.context),
        ("--kubeconfig", args.kubeconfig),
    ):
        # A lone surrogate (bytes of argv that are not UTF-8) cannot be sent, printed or opened.
        if value is not None and not is_utf8(value):
            print(f"jobset-controller: {what}: not valid UTF-8 text", file=sys.stderr)
            return 2
    try:
        target = load(args.kubeconfig, os.environ, context=args.context, namespace=args.namespace)
    except KubeconfigError as error:
        print(one_line(f"error: {error}"), file=sys.stderr)
        return 2
    return stops.run(lambda: _status(target, args, out))


async def _status(target: Target, args: argparse.Namespace, out: TextIO) -> int:
    from jobset_controller.runtime.client import ApiError, KubeClient, NotFound
    from jobset_controller.tools.documents import one_line
    from jobset_controller.tools.status_reader import read_states
    from jobset_controller.tools.status_tree import render

    frames = AwaitedOutput(out)
    client = await KubeClient.connect(kubeconfig=target.kubeconfig, context=target.context)
    try:
        while True:
            try:
                states = await read_states(client, target.namespace, args.name)
            except NotFound:
                print(
                    one_line(
                        f'Error from server (NotFound): jobsets "{args.name}" not found in '
                        f"namespace {target.namespace}"
                    ),
                    file=sys.stderr,
                )
                return 1
            except ApiError as error:
                print(one_line(f"Error from server: {error}"), file=sys.stderr)
                return 1
            text = "\n".join(render(state, last_events=args.events) for state in states)
            if not states:
                text = one_line(f"No JobSets found in namespace {target.namespace}.") + "\n"
            if not args.watch:
                out.write(text)
                return 0
            try:
                await frames.write((CLEAR_SCREEN if out.isatty() else "") + text + "\n")
            except BrokenPipeError:
                return 0  # the reader has gone (`| head`): the watch has no one to show
            await asyncio.sleep(args.interval)
    finally:
        await client.close()
