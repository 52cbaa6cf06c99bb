"""``release-followers``: place the followers our gate holds when this controller does not run.

See docs/operations.md#rollback. In Gate mode (``exclusivePlacement.followers: Gate``) a follower
whose leader is not bound yet waits behind the scheduling gate
``jobset.sigs.k8s.io/exclusive-placement``, and this controller's pod controller releases it
once the leader is bound. Upstream's controller does not know the gate: after a rollback to it
(or if this controller died), such followers would stay ``SchedulingGated`` for ever. This command
does the pod controller's release from outside: each gated follower whose leader is bound gets
the leader's domain as its nodeSelector and loses our gate (the same patch,
``controller.pods.release_follower``), which is exactly where upstream's webhook would have put
it, so upstream's pod controller finds it well placed. With ``--wait`` it keeps looking until no
follower is gated (a leader waiting for a free domain may take long); it never deletes a pod
(a deleted pod counts as a failure of its Job, and with ``backoffLimit: 0`` fails it).

Exit codes: 0 no follower (left) behind the gate, 1 some still wait (without ``--wait``, or when
``--timeout`` passed) or an API error, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from jobset_controller.runtime.interrupts import StopSignals
from jobset_controller.tools.kubectl_context import KubeconfigError, Target, load

if TYPE_CHECKING:
    from jobset_controller.runtime.client import KubeClient


def add_release_followers_parser(commands: Any) -> None:
    command = commands.add_parser(
        "release-followers",
        help="place followers held by the exclusive-placement gate (after a rollback)",
        description=(
            "Place every follower pod waiting behind the gate jobset.sigs.k8s.io/exclusive-"
            "placement whose leader is bound, as this controller's pod controller does; run it "
            "when another controller (upstream's) has replaced this one."
        ),
    )
    command.add_argument("-n", "--namespace", default=None, help="default: the context's")
    command.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (ignores -n)"
    )
    command.add_argument("--context", default=None, help="kubeconfig context to use")
    command.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, ~/.kube/config")
    command.add_argument(
        "--wait", action="store_true", help="keep going until no follower is gated"
    )
    command.add_argument(
        "--timeout",
        type=float,
        default=0.0,
        help="with --wait: give up after this many s (0: never)",
    )
    command.add_argument("--interval", type=float, default=2.0, help="with --wait: s between looks")


def run_release_followers(
    args: argparse.Namespace, out: TextIO | None = None, *, stops: StopSignals | None = None
) -> int:
    """Release the gated followers; SIGINT or SIGTERM (`stops`) ends it with 1 (not finished)."""
    out = out or sys.stdout
    stops = stops or StopSignals()
    stops.exit_with(1)  # not finished
    if args.interval <= 0 or args.timeout < 0:
        print("jobset-controller: --interval must be positive, --timeout >= 0", file=sys.stderr)
        return 2
    try:
        target = load(args.kubeconfig, os.environ, context=args.context, namespace=args.namespace)
    except KubeconfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    namespace = None if args.all_namespaces else target.namespace
    return stops.run(lambda: _release(target, namespace, args, out))


async def _release(
    target: Target, namespace: str | None, args: argparse.Namespace, out: TextIO
) -> int:
    from jobset_controller.runtime.client import ApiError, KubeClient

    client = await KubeClient.connect(kubeconfig=target.kubeconfig, context=target.context)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    reported: set[str] = set()
    try:
        while True:
            try:
                waiting = await release_once(client, namespace, out, reported)
            except ApiError as error:
                print(f"Error from server: {error}", file=sys.stderr)
                return 1
            if not waiting:
                out.write("no follower waits behind the exclusive-placement gate\n")
                return 0
            if not args.wait or (deadline is not None and time.monotonic() > deadline):
                out.write(f"{len(waiting)} follower(s) still wait for their leader\n")
                return 1
            await asyncio.sleep(args.interval)
    finally:
        await client.close()


async def release_once(
    client: KubeClient, namespace: str | None, out: TextIO, reported: set[str]
) -> list[str]:
    """One look: release what can be released; return the followers still gated."""
    from jobset_controller.api.placement import (
        LEADER_FOLLOWER,
        PLACEMENT_LABEL,
        is_gated_by_us,
        node_name,
        owner_uid,
    )
    from jobset_controller.controller.pods import release_follower
    from jobset_controller.controller.resources import NODES, PODS
    from jobset_controller.reconcile.pod_placement import plan_pods
    from jobset_controller.runtime.client import NotFound

    path = PODS.path(namespace)
    listed = await client.get(path, labelSelector=f"{PLACEMENT_LABEL}={LEADER_FOLLOWER}")
    by_job: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for pod in listed.get("items") or ():
        by_job[(pod["metadata"]["namespace"], owner_uid(pod) or "")].append(pod)
    nodes: dict[str, Mapping[str, str] | None] = {}

    async def node_labels_of(names: set[str]) -> None:
        for name in names - nodes.keys():
            try:
                node = await client.get(NODES.path(None, name))
                nodes[name] = (node.get("metadata") or {}).get("labels") or {}
            except NotFound:
                nodes[name] = None

    waiting: list[str] = []
    for (pod_namespace, _), pods in sorted(by_job.items()):
        gated = [p for p in pods if is_gated_by_us(p)]
        if not gated:
            continue
        await node_labels_of({node_name(p) for p in pods if node_name(p)})
        plan = plan_pods(pods, lambda name: nodes.get(name))
        released: set[str] = set()
        for release in plan.releases:
            try:
                await release_follower(client, pod_namespace, release)
            except NotFound:
                continue
            released.add(release.pod)
            out.write(
                f"pod {pod_namespace}/{release.pod} released: "
                f"{release.selector_key}={release.domain}\n"
            )
        for pod in gated:
            name = f"{pod_namespace}/{pod['metadata']['name']}"
            if pod["metadata"]["name"] in released:
                continue
            waiting.append(name)
            if name not in reported:
                reported.add(name)
                out.write(f"pod {name} waits: its leader is not bound yet\n")
    return waiting
