"""The flake hunter behind hack/flaky.sh: run tests again and again under CPU load, then print
how often each one failed.

Why: a cluster-bound test that passes on a quiet machine can still race (a status read before
the write it waits for, a fixed sleep that is usually long enough). CI machines are not quiet,
so a test is only trustworthy once it has passed many times with the cores busy. Each run is a
fresh pytest process (new clusters, new ports), so runs do not share state; the load is
`--load` busy-looping processes at normal priority started before the first run and stopped
after the last, so every run of every test sees it.

Output: one line per test that did not pass every run (runs, failures, errors, skips, rate and
its first failure's last line), then the totals. Exit 0 only when every run of every test passed;
a skip is reported and counts as not passed (a test that could not run proved nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from jobset_controller_dev.envtest.processes import parent_death_signal

REPO = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Tally:
    """What one test did over the runs."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    first_problem: str = ""

    @property
    def runs(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    @property
    def clean(self) -> bool:
        return self.passed == self.runs


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hack/flaky.sh",
        description="Rerun tests under CPU load and print each one's failure rate.",
        epilog="Arguments after -- go to pytest as they are (e.g. -- -k status -n 2).",
    )
    parser.add_argument("tests", nargs="+", help="pytest paths or node ids")
    parser.add_argument("--runs", type=int, default=10, help="pytest runs (default 10)")
    parser.add_argument(
        "--load", type=int, default=8, help="busy-looping processes beside them (default 8)"
    )
    argv = list(argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    args = parser.parse_args(argv)
    if args.runs < 1 or args.load < 0:
        parser.error("--runs must be at least 1 and --load at least 0")
    args.pytest_args = extra
    return args


@contextmanager
def cpu_load(processes: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`processes` busy loops at normal priority until the block ends, or until this process
    ends in any way (the kernel's parent-death signal): a hunter stopped by `kill`, even -9,
    leaves no load behind to skew the next hunt (one did, 2026-11-29: 16 burners, not 8)."""
    burners = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=parent_death_signal(),
        )
        for _ in range(processes)
    ]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.send_signal(signal.SIGKILL)
            burner.wait()


def read_report(path: Path, tallies: dict[str, Tally], run: int) -> None:
    """Add one run's junit report to the tallies."""
    if not path.is_file():
        return
    for case in ElementTree.parse(path).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        tally = tallies.setdefault(name, Tally())
        failure, error = case.find("failure"), case.find("error")
        skipped = case.find("skipped")
        if failure is not None or error is not None:
            problem = failure if failure is not None else error
            assert problem is not None
            if failure is not None:
                tally.failed += 1
            else:
                tally.errors += 1
            if not tally.first_problem:
                lines = (problem.get("message") or problem.text or "").strip().splitlines()
                tally.first_problem = f"run {run}: {lines[-1] if lines else '(no message)'}"
        elif skipped is not None:
            tally.skipped += 1
            if not tally.first_problem:
                tally.first_problem = f"run {run}: skipped: {skipped.get('message', '')}"
        else:
            tally.passed += 1


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    # SIGTERM ends the hunt through its cleanups (the load, the scratch directory).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    pytest = [str(Path(os.environ.get("JOBSET_VENV", REPO / ".venv")) / "bin" / "pytest")]
    tallies: dict[str, Tally] = {}
    failed_runs = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flaky-") as scratch, cpu_load(args.load):
        for run in range(1, args.runs + 1):
            report = Path(scratch) / f"run-{run}.xml"
            command = [
                *pytest,
                *args.tests,
                "-p",
                "no:cacheprovider",
                "-q",
                f"--junitxml={report}",
                *args.pytest_args,
            ]
            begun = time.monotonic()
            code = subprocess.run(command, cwd=REPO, check=False).returncode
            took = time.monotonic() - begun
            print(f"[flaky] run {run}/{args.runs}: exit {code} in {took:.0f} s", flush=True)
            failed_runs += code != 0
            read_report(report, tallies, run)
    print(f"\n[flaky] {args.runs} runs of {len(tallies)} tests at load {args.load}, ", end="")
    print(f"{time.monotonic() - started:.0f} s in all")
    unclean = {name: tally for name, tally in sorted(tallies.items()) if not tally.clean}
    for name, tally in unclean.items():
        rate = (tally.runs - tally.passed) / tally.runs
        print(
            f"  {name}: {tally.runs} runs, {tally.failed} failed, {tally.errors} errors, "
            f"{tally.skipped} skipped ({rate:.0%}); first: {tally.first_problem}"
        )
    problems = sum(tally.runs - tally.passed for tally in tallies.values())
    total = sum(tally.runs for tally in tallies.values())
    print(f"[flaky] {problems} of {total} test runs did not pass; {failed_runs} pytest runs failed")
    if not tallies:
        print("[flaky] no test ran", file=sys.stderr)
        return 1
    return 0 if problems == 0 and failed_runs == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
