#!/usr/bin/env python3
"""Hours of churn with faults, ours beside upstream v0.12.0: `hack/soak.py --minutes 60`.

Each controller (`--controller both`, the default) runs as two leader-elected replicas on a fresh
full local cluster (kwok nodes, kube-controller-manager, kube-scheduler) with Kueue, under the
same seeded stream of JobSets and the same seeded faults (src/jobset_controller_dev/soak/,
docs/reliability.md): one after the other, or with `--at-once` both at the same time, each its
own cluster in a process of its own, so that both meet the same machine (on 2 cores, a loaded
one). Prints a table side by side and every invariant violation by name; `--out` writes the
figures as JSON. Exit code 1 when ours broke an invariant.

Needs the cached Kubernetes binaries (JOBSET_K8S_BIN or hack/k8s-binaries.sh), Kueue
(hack/kueue.sh) and, for upstream, hack/upstream-jobset.sh: `hack/test-env.sh` fetches them all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from jobset_controller_dev.soak.report import table
from jobset_controller_dev.soak.run import Options, run
from jobset_controller_dev.soak.stack import QUEUE_CPU

FLAGS = (
    "minutes",
    "seed",
    "rate",
    "fault_every",
    "first_fault",
    "nodes",
    "burst",
    "stuck_after",
    "drain_limit",
    "delete_finished",
    "queue_cpu",
)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=20261128)
    parser.add_argument("--controller", choices=("ours", "upstream", "both"), default="both")
    parser.add_argument("--at-once", action="store_true", help="run both at the same time")
    parser.add_argument("--rate", type=float, default=2.0, help="JobSets a second")
    parser.add_argument("--fault-every", type=float, default=120.0, help="seconds")
    parser.add_argument("--first-fault", type=float, default=60.0, help="seconds")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--burst", type=int, default=500, help="JobSets of the burst fault")
    parser.add_argument("--stuck-after", type=float, default=300.0, help="seconds")
    parser.add_argument("--drain-limit", type=float, default=300.0, help="seconds")
    parser.add_argument(
        "--delete-finished",
        type=float,
        default=120.0,
        help="judge and delete each JobSet this many seconds after it finished (at least the "
        "120 s settle bound); 0 keeps every finished JobSet",
    )
    parser.add_argument(
        "--queue-cpu", type=int, default=QUEUE_CPU, help="cpu of each of Kueue's two queues"
    )
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--out", type=Path, help="the figures as JSON")
    return parser.parse_args()


def at_once(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Both controllers at the same time, each this script in a process of its own."""
    children = []
    for controller in ("ours", "upstream"):
        flags = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in FLAGS]
        out = workdir / f"{controller}.json"
        command = [
            sys.executable,
            __file__,
            f"--controller={controller}",
            *flags,
            f"--workdir={workdir}",
            f"--out={out}",
        ]
        log = (workdir / f"{controller}.log").open("w")
        children.append((subprocess.Popen(command, stdout=log, stderr=log), out))
        print(f"soak: {controller} running, output in {workdir / controller}.log", file=sys.stderr)
    figures = []
    for child, out in children:
        child.wait()
        figures += json.loads(out.read_text())
    return figures


def main() -> int:
    args = arguments()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="jobset-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.controller == "both" and args.at_once:
        figures = at_once(args, workdir)
    else:
        controllers = ["ours", "upstream"] if args.controller == "both" else [args.controller]
        figures = []
        for controller in controllers:
            print(
                f"soak: {controller}, {args.minutes:g} min, seed {args.seed}, logs under "
                f"{workdir / controller}",
                file=sys.stderr,
            )
            options = Options(
                controller=controller,
                workdir=workdir / controller,
                **{name: getattr(args, name) for name in FLAGS},
            )
            figures.append(run(options).figures())
    print(table(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))
    return 1 if any(f["violations"] for f in figures if f["controller"] == "ours") else 0


if __name__ == "__main__":
    sys.exit(main())
