"""`make dev`: a local cluster, the controller, and an example JobSet, in one command.

1. Builds (first time) or reuses the Kubernetes binaries.
2. Starts the full local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
   and kwok with 8 simulated nodes (no containers: kwok plays the kubelet).
3. Starts `jobset-controller run` against it (no leader election), logging to a file.
4. Applies an example JobSet (examples/pytorch-workers.yaml by default) and prints its progress,
   Jobs, pods and conditions, until it completes or fails.
5. Keeps everything up and prints the kubeconfig, so you can `kubectl apply` your own JobSets;
   Ctrl-C (or SIGTERM) stops the controller and the cluster and leaves no process behind.

`--exit-when-done` stops after step 4 (used by the test of this command).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from jobset_controller.api.constants import JOBSET_NAME_KEY
from jobset_controller_dev.envtest.binaries import FULL_COMPONENTS, ensure_binaries, repo_root
from jobset_controller_dev.envtest.fullcluster import FullCluster
from jobset_controller_dev.envtest.processes import ManagedProcess, free_port

JOBSET_NAME_LABEL = JOBSET_NAME_KEY


def _default_example() -> Path:
    root = repo_root()
    return (root or Path.cwd()) / "examples" / "pytorch-workers.yaml"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="make dev", description=__doc__.split("\n")[0])
    parser.add_argument("--example", type=Path, default=_default_example(), help="JobSet to apply")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for it")
    parser.add_argument("--exit-when-done", action="store_true", help="stop once it finished")
    return parser


def _summary(cluster: FullCluster, namespace: str, name: str) -> tuple[str, str]:
    """(one progress line, terminal state or "")."""
    status, js = cluster.request(
        "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"
    )
    if status != 200:
        return f"jobset {name}: not found ({status})", ""
    selector = f"{JOBSET_NAME_LABEL}={name}"
    jobs = cluster.list_items(
        f"/apis/batch/v1/namespaces/{namespace}/jobs", label_selector=selector
    )
    pods = cluster.list_items(f"/api/v1/namespaces/{namespace}/pods", label_selector=selector)
    phases: dict[str, int] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase", "Pending")
        phases[phase] = phases.get(phase, 0) + 1
    js_status: dict[str, Any] = js.get("status") or {}
    conditions = ",".join(
        f"{c['type']}={c['status']}" for c in js_status.get("conditions") or () if c.get("type")
    )
    pod_text = " ".join(f"{k}:{v}" for k, v in sorted(phases.items())) or "none"
    line = (
        f"jobset {name}: jobs={len(jobs)} pods[{pod_text}] restarts={js_status.get('restarts', 0)}"
        f" conditions[{conditions or 'none'}]"
    )
    return line, str(js_status.get("terminalState") or "")


def _start_controller(cluster: FullCluster) -> tuple[ManagedProcess, int, int]:
    metrics, health = free_port(), free_port()
    # Internal certificates (the default): the Secret in `default`, the webhook server on a free
    # loopback port with its files in the cluster's work directory (not the shared /tmp path).
    config = cluster.workdir / "jobset-controller-config.yaml"
    certs = cluster.workdir / "jobset-controller-certs"
    config.write_text(
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\nkind: Configuration\n"
        f"webhook: {{host: 127.0.0.1, port: 0, certDir: '{certs}'}}\n"
    )
    controller = ManagedProcess(
        "jobset-controller",
        [
            sys.executable,
            "-m",
            "jobset_controller",
            "run",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--config={config}",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            "--log-format=console",
        ],
        cluster.workdir / "jobset-controller.log",
    )
    controller.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as reply:
                if reply.status == 200:
                    return controller, metrics, health
        except OSError:
            pass
        if not controller.running():
            break
        time.sleep(0.2)
    raise RuntimeError(f"jobset-controller did not become ready:\n{controller.log_tail()}")


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    manifest = yaml.safe_load(args.example.read_text())
    name = manifest["metadata"]["name"]
    say("==> Kubernetes binaries (the first run builds them from Go modules: ~10 min)")
    bin_dir = ensure_binaries(FULL_COMPONENTS)
    say("==> starting the local cluster (etcd, apiserver, controller-manager, scheduler, kwok)")
    with FullCluster(bin_dir=bin_dir) as cluster:
        cluster.add_volumes(8)  # for volumeClaimPolicies examples (no dynamic provisioner)
        say(f"    ready in {cluster.startup_seconds:.1f} s, {len(cluster.nodes)} kwok nodes")
        controller, metrics, health = _start_controller(cluster)
        try:
            say(f"==> jobset-controller running (log: {controller.log_path})")
            say(f"    metrics http://127.0.0.1:{metrics}/metrics, probes :{health}")
            say(f"==> applying {args.example}")
            cluster.kubectl("apply", "--server-side", "-n", "default", "-f", str(args.example))
            last, state = "", ""
            deadline = time.monotonic() + args.timeout
            while not stop.is_set() and time.monotonic() < deadline:
                line, state = _summary(cluster, "default", name)
                if line != last:
                    say(f"    {line}")
                    last = line
                if state:
                    break
                stop.wait(1.0)
            if state:
                say(f"==> JobSet {name} {state}")
            elif not stop.is_set():
                say(f"==> JobSet {name} did not finish within {args.timeout:.0f} s")
                return 1
            if not args.exit_when_done and not stop.is_set():
                say("")
                say("The cluster and the controller keep running. In another terminal:")
                say(f"    export KUBECONFIG={cluster.kubeconfig}")
                say(f"    alias kubectl={cluster.bin_dir / 'kubectl'}")
                say("    kubectl apply --server-side -f examples/coordinator.yaml")
                say("    kubectl get jobsets,jobs,pods")
                say("Ctrl-C stops everything.")
                stop.wait()
            say("==> stopping")
            return 0 if state == "Completed" or not args.exit_when_done else 1
        finally:
            controller.stop(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
