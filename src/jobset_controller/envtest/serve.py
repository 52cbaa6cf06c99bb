"""Run a control plane in the foreground so a person can point kubectl at it."""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

from jobset_controller.envtest.controlplane import ControlPlane


def main() -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    print("starting etcd + kube-apiserver (first run builds the binaries)...", file=sys.stderr)
    with ControlPlane() as plane:
        print(f"ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(f"kubectl binary: {plane.bin_dir / 'kubectl'}", file=sys.stderr)
        print("Ctrl-C to stop", file=sys.stderr)
        sys.stdout.flush()
        stop.wait()
        print("stopping...", file=sys.stderr)
    return 0
