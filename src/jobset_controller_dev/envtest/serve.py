"""Run a control plane in the foreground so a person can point kubectl at it.

`python -m jobset_controller_dev.envtest` runs etcd + kube-apiserver; with `--full` it runs the full
local cluster instead (kube-controller-manager, kube-scheduler, kwok and simulated nodes).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

from jobset_controller_dev.envtest.controlplane import ControlPlane
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.kwok_stages import DEFAULT_RUN_DURATION


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobset_controller_dev.envtest",
        description="Run a local control plane until Ctrl-C; prints `export KUBECONFIG=...`.",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also run kube-controller-manager, kube-scheduler and kwok with 8 simulated nodes",
    )
    parser.add_argument(
        "--pod-run-duration",
        type=float,
        default=DEFAULT_RUN_DURATION,
        metavar="SECONDS",
        help="with --full: how long a simulated pod runs before it succeeds (default %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`argv` None means no options."""
    args = _parser().parse_args([] if argv is None else list(argv))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    plane: ControlPlane
    if args.full:
        what = "etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok"
        plane = FullCluster(pod_run_duration=args.pod_run_duration)
    else:
        what = "etcd + kube-apiserver"
        plane = ControlPlane()
    print(f"starting {what} (first run builds the binaries)...", file=sys.stderr)
    with plane:
        print(f"ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
        if isinstance(plane, FullCluster):
            print(f"simulated nodes: {', '.join(plane.nodes)}", file=sys.stderr)
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(f"kubectl binary: {plane.bin_dir / 'kubectl'}", file=sys.stderr)
        print("Ctrl-C to stop", file=sys.stderr)
        sys.stdout.flush()
        stop.wait()
        print("stopping...", file=sys.stderr)
    return 0
