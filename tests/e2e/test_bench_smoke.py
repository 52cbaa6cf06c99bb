"""Every benchmark in hack/bench runs at its smallest size, so that every figure of the README and
docs/benchmarks.md comes from code the suite runs (issue 43, item 8).

Why: the benches are run by hand, and rarely. A change to the controller, to envtest or to a
module the benches share (benchlib, ganglib, upstreamlib, runtime_venv) can break one unnoticed
until the next time someone measures. Each test here runs one bench the way docs/benchmarks.md
runs it (`python hack/bench/<bench>.py`, from the repository, `src` and `hack/bench` importable),
at the smallest size its flags allow: the fewest objects, the shortest windows, one round. The
test then checks that the bench exited 0 and printed its result: its table's header, and the rows
that carry the figures, each with a number where a number belongs (or an exact count where the
count cannot vary, such as the one Event written for one JobSet). The figures themselves are not
judged: a bench measures, it does not pass or fail.

The comparison with upstream's controller v0.12.0 is kept wherever a bench has one (one more
controller on the same small cluster costs seconds). Those tests carry the `upstream` marker, for
which hack/tools_needed.py builds upstream's controller. restart_bench runs on kwok
alone (`--skip-node`): its real-node part needs root, the node packages and the controller's
image, which the node tier has and this tier does not.

Each bench runs in a process session of its own with TMPDIR set to the test's tmp_path, where the
benches' clusters put their directories. A bench that overruns its bound is killed with its whole
session, and after every bench no process may still name tmp_path: a bench that leaves a cluster
running fails its test.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.source_trees import parse_python

from jobset_controller_dev.envtest.polling import poll, scaled
from jobset_controller_dev.envtest.processes import processes_mentioning

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "hack" / "bench"
# The modules of hack/bench that measure nothing themselves: the benches' shared pieces and the
# helper processes they start.
HELPERS = frozenset(
    {"benchlib", "ganglib", "upstreamlib", "runtime_venv", "conn_clients", "conn_server",
     "count_watch", "rounds"}
)  # fmt: skip
# The benches that run upstream's controller beside ours: hack/tools_needed.py builds it for
# this marker.
UPSTREAM = pytest.mark.upstream
# A figure as the benches print it: an integer, a decimal, a %g exponent, possibly negative (a
# difference of two RSS readings).
N = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
# What some benches measure one row each of (their own names).
REVIEWS = ("mpod-leader", "mpod-follower", "vpod-leader", "vpod-follower", "mjobset", "vjobset")
CONNECTIONS = ("idle-plain", "idle-tls", "slow-tls", "hello-tls")
REQUESTS = ("probe", "scrape", "admission", "admission/512B")


def run_bench(tmp_path: Path, script: str, *flags: str, within: float) -> str:
    """Run `hack/bench/<script> <flags>` as docs/benchmarks.md does; its stdout once it exited 0
    within `within` seconds (the caller's `scaled(...)`). On a failure the message holds the ends
    of its stdout and stderr (the benches print progress on stderr, results on stdout)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "src"), str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        # Every temporary directory of the bench (its clusters' too) under the test's own: what
        # the check for processes left running looks for.
        "TMPDIR": str(tmp_path),
    }
    argv = [sys.executable, str(BENCH / script), *flags]
    with subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # one session: a bench past its bound is killed whole
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=within)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate(timeout=scaled(60))
            raise AssertionError(
                f"{script} {' '.join(flags)}: still running after {within:g} s\n"
                + _tails(stdout, stderr)
            ) from None
    assert process.returncode == 0, (
        f"{script} {' '.join(flags)} exited {process.returncode}\n" + _tails(stdout, stderr)
    )
    marker = str(tmp_path)
    poll(
        lambda: processes_mentioning(marker) == [],
        f"{script}: no process of its own left running",
        30,
        state=lambda: f"still running: {processes_mentioning(marker)}",
    )
    return stdout


def _tails(stdout: str, stderr: str) -> str:
    return f"--- stdout (end)\n{stdout[-4000:]}\n--- stderr (end)\n{stderr[-6000:]}"


def has(output: str, *patterns: str) -> None:
    """Each regular expression matches a whole line of `output`."""
    missing = [p for p in patterns if not re.search(rf"^{p}$", output, re.MULTILINE)]
    assert not missing, "lines not printed:\n  " + "\n  ".join(missing) + f"\n--- output\n{output}"


def test_every_bench_in_hack_bench_has_a_smoke_test_here() -> None:
    """A bench added to hack/bench without a test here would be the next one nobody runs."""
    benches = {p.stem for p in BENCH.glob("*.py")} - HELPERS
    tests = {
        node.name for node in parse_python(Path(__file__)).body if isinstance(node, ast.FunctionDef)
    }
    untested = sorted(b for b in benches if f"test_{b}_runs_at_its_smallest_size" not in tests)
    assert not untested, f"benches without a smoke test in {Path(__file__).name}: {untested}"


@UPSTREAM
def test_admission_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Every review kind, idle and busy (one JobSet of one Job), closed-loop on one connection
    and at a rate, for upstream's webhook server and ours, in two rounds taken in turn (the
    medians in the table, each side's p99 spread beside the goals); every review answered as
    expected."""
    out = run_bench(
        tmp_path, "admission_bench.py",
        "--conns", "1", "--seconds", "0.5", "--rate", "25", "--rate-conns", "1",
        "--rate-seconds", "0.5", "--busy-jobs", "1", "--rounds", "2",
        within=scaled(900),
    )  # fmt: skip
    cell = rf"{N} / {N}"
    has(
        out,
        r"\| review \| conns \| load \| reviews/s \(upstream / ours\) \|.*",
        *(
            rf"\| {kind} \| 1 \| {load} \| {cell} \| .*"
            for kind in REVIEWS
            for load in ("idle", "busy")
        ),
        rf"\| mpod-leader \| 1 \| idle, 25/s due \| {cell} \| .*",
        # the sides in turn: the order reversed in the second round
        r"round 1 of 2: upstream\n(?:.*\n)*round 1 of 2: ours\n(?:.*\n)*"
        r"round 2 of 2: ours\n(?:.*\n)*round 2 of 2: upstream",
        r".*; 2 rounds, the sides in turn, each figure the median of its rounds",
        rf"  busy vpod-follower at 25/s: p99 ours {N} ms / upstream {N} ms = .* "
        rf"\(rounds: ours {N}-{N}, upstream {N}-{N}\)",
        r"reviews not answered as expected in the windows: \{'upstream': 0, 'ours': 0\}",
    )


def test_agent_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """One agent start of the tree under test: start, RSS, barrier lift, peak RSS."""
    out = run_bench(tmp_path, "agent_bench.py", "--runs", "1", within=scaled(300))
    has(
        out,
        r"agent start and memory, median of 1 runs per tree",
        r"tree\s+start s\s+RSS MiB\s+lift s\s+peak MiB",
        rf"src\s+{N}\s+{N}\s+{N}\s+{N}",
    )


def test_conn_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """One connection of each kind on our server and Go's, and one slow TLS connection held for
    a second on our whole controller and on Go's server, reviews timed meanwhile."""
    out = run_bench(
        tmp_path, "conn_bench.py", "--conns", "1", "--slow", "1", "--hold", "1", "--after", "1",
        within=scaled(600),
    )  # fmt: skip
    has(
        out,
        r"\| connection \| ours \| go \| ours/go \|",
        *(rf"\| {kind} \| {N} \| {N} \| {N}x \|" for kind in CONNECTIONS),
        r"\| figure \| ours \| go \|",
        rf"\| RSS peak, MiB \| {N} \| {N} \|",
        r"\| reviews answered / failed \| [1-9]\d* / 0 \| [1-9]\d* / 0 \|",
        r"ours: issue 24's target (met|NOT met)",
    )


def test_controller_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """One JobSet of 3 Jobs with 1 worker and with 4: created, completed, the speed-up."""
    out = run_bench(
        tmp_path, "controller_bench.py", "--jobsets", "1", "--workers", "1", "4", within=scaled(300)
    )
    has(
        out,
        *(
            rf"workers={w}: 1 JobSets -> 3 Jobs in {N} s; all Completed {N} s after the Jobs "
            rf"finished; {N} reconciles, {N} writes; worst loop lag {N} ms"
            for w in (1, 4)
        ),
        rf"speed-up of workers=4 over workers=1 \(Jobs created\): {N}x",
        rf"peak RSS of this process \(controller \+ bench client\): {N} MiB",
    )


@UPSTREAM
def test_cpu_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Upstream's controller and ours side by side, every scenario at size 1, one start, one
    round, a one-second idle window."""
    out = run_bench(
        tmp_path, "cpu_bench.py",
        "--upstream", "--rounds", "1", "--starts", "1", "--big", "1", "--many", "1", "--idle", "1",
        within=scaled(900),
    )  # fmt: skip
    row = rf"{N} \| {N} \| {N}x"
    has(
        out,
        r"\| figure \| upstream \| current \| last/first \|",
        rf"\| start to /readyz, best \(s\) \| {row} \|",
        rf"\| 1x1: all Jobs exist \(s\) \| {row} \|",
        rf"\| 1x4: controller CPU \(s\) \| {N} \| {N} \| ({N}x|-) \|",
        rf"\| 1 completions: all Completed \(s\) \| {row} \|",
        rf"\| idle: CPU per minute \(s\) \| {N} \| {N} \| ({N}x|-) \|",
        rf"\| RSS at the end \(MiB\) \| {row} \|",
    )


@UPSTREAM
def test_events_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """One suspended JobSet, upstream's controller then ours: each writes its one Event."""
    out = run_bench(
        tmp_path, "events_bench.py", "--jobsets", "1", "--in-flight", "1", within=scaled(600)
    )
    has(
        out,
        r"\| figure \| upstream \| ours \| last / first \|",
        r"\| Events written \| 1 \| 1 \| 1\.00x \|",
        # One JobSet can cost a controller less than a clock tick of CPU (0 s): no ratio then.
        rf"\| controller CPU \(s\) \| {N} \| {N} \| ({N}x|-) \|",
        rf"\| controller RSS at the end \(MiB\) \| {N} \| {N} \| {N}x \|",
    )


def test_gang_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Every mode once on one node: one JobSet of one Job of one pod."""
    out = run_bench(
        tmp_path, "gang_bench.py",
        "--rounds", "1", "--racks", "1", "--nodes", "1", "--replicated-jobs", "1", "--jobs", "1",
        "--pods", "1",
        within=scaled(600),
    )  # fmt: skip
    has(
        out,
        r"\| figure \| none \| gang \| rjob-gangs \| basic \| gang / none \| rjob-gangs / none "
        r"\| basic / none \|",
        *(
            rf"\| 1 \| {mode} \| {N} \| {N} \| .*"
            for mode in ("none", "gang", "rjob-gangs", "basic")
        ),
        rf"\| create -> all bound \(s\) \| {N} \| {N} \| {N} \| {N} \| {N}x \| {N}x \| {N}x \|",
        rf"\| scheduler CPU \(s\) \| {N} \| {N} \| {N} \| {N} \| .*",
    )


def test_gang_contention_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """`gang_bench.py --contention`, both modes: two JobSets of one pod on one node, so each
    fits alone and not together (and no split can deadlock: the second runs once the first
    ends)."""
    out = run_bench(
        tmp_path, "gang_bench.py",
        "--contention", "--rounds", "1", "--racks", "1", "--nodes", "1", "--jobsets", "2",
        "--jobset-pods", "1", "--pods", "1", "--work", "1",
        within=scaled(600),
    )  # fmt: skip
    has(
        out,
        r"\| figure \| none \| gang \| gang / none \|",
        r"\| runs ending in a deadlock \| 0 of 1 \| 0 of 1 \| - \|",
        rf"\| first JobSet completed \(s\) \| {N} \| {N} \| {N}x \|",
        rf"\| last JobSet completed \(s\) \| {N} \| {N} \| {N}x \|",
    )


def test_http_parser_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """One request of each kind, once; h11, the contender, is not in the test venv, so its
    column is empty (the bench says so) and httptools' column and the client table are
    measured."""
    out = run_bench(
        tmp_path, "http_parser_bench.py", "--count", "1", "--repeat", "1", within=scaled(120)
    )
    has(
        out,
        r"request\s+httptools us\s+h11 us\s+ratio",
        *(rf"{kind}\s+{N}\s+(-\s+-|{N}\s+{N}x)" for kind in REQUESTS),
        r"answer\s+ours us\s+httptools us\s+ratio",
        rf"create\s+{N}\s+{N}\s+{N}x",
        rf"create/4 reads\s+{N}\s+{N}\s+{N}x",
    )


def test_informer_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """One Job: synced untrimmed, trimmed and compact, and the typed client's baseline."""
    out = run_bench(tmp_path, "informer_bench.py", "--jobs", "1", within=scaled(300))
    has(
        out,
        rf"created 1 Jobs in {N} s",
        *(
            rf"  {label:<10} sync 1 jobs in\s+{N} ms;\s+{N} KiB/job retained; worst loop lag\s+"
            rf"{N} ms"
            for label in ("untrimmed", "trimmed", "compact")
        ),
        rf"  ratio      compact \(as the controller caches\)/untrimmed: {N}",
        rf"  typed      deserialise 1 jobs into V1Job:\s+{N} ms",
    )


@UPSTREAM
def test_placement_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Every strategy, ours and upstream's where it has one, on one node in one rack: one Job
    of one pod, with the forced restart, after a one-second reading of the idle cluster."""
    out = run_bench(
        tmp_path, "placement_bench.py",
        "--racks", "1", "--nodes", "1", "--pods", "1", "--idle", "1",
        within=scaled(900),
    )  # fmt: skip
    row = rf"{N} \| {N} \| {N} \| {N} \({N} / {N} / {N} / {N}\) \| {N} \| .* \| {N} \|"
    has(
        out,
        r"\| controller \| strategy \| seconds \| pods/s \| x ceiling \| .*",
        *(
            rf"\| ours \| {name} \| {row}"
            for name in ("none", "affinity", "reject", "gate", "node-selector")
        ),
        *(rf"\| upstream \| {name} \| {row}" for name in ("none", "reject", "node-selector")),
        rf"ours reject / upstream reject: pods/s {N}x, API requests {N}x",
        rf"memory per cached pod \(parsed JSON\): full {N} KiB, trimmed {N} KiB \({N}%\)",
    )


def test_pod_list_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Two pods listed in pages of one (a continue token followed), then relisted both ways."""
    out = run_bench(
        tmp_path, "pod_list_bench.py", "--pods", "2", "--pages", "1", "--repeat", "1",
        within=scaled(300),
    )  # fmt: skip
    has(
        out,
        rf"created 2 pods in {N} s",
        r"\| page \| pods \| wall s \| CPU s \| peak MiB \| kept MiB \|",
        rf"\| 1 \| 2 \| {N} \| {N} \| {N} \| {N} \|",
        r"\| relist \| streamed \| wall s \| CPU s \| peak MiB \| kept MiB \|",
        rf"\| stream \| 1 \| {N} \| {N} \| {N} \| {N} \|",
        rf"\| list \| 0 \| {N} \| {N} \| {N} \| {N} \|",
    )


@UPSTREAM
def test_pod_scale_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Both sides at one checkpoint of one pod: a JobSet of one Job of one pod in racks of one
    node, each controller started fresh on it and measured, the cluster's row beside them."""
    out = run_bench(
        tmp_path, "pod_scale_bench.py",
        "--pods", "1", "--step", "1", "--jobs", "1", "--pods-per-job", "1", "--rack-nodes", "1",
        within=scaled(600),
    )  # fmt: skip
    has(
        out,
        r"\| pods \| side \| s to ready \| CPU s to quiet \| VmRSS MiB \| VmHWM MiB \| "
        r"API requests \|",
        *(
            rf"\| 1 \| {side} \| {N} \| {N} \| {N} \| {N} \| {N} \|"
            for side in ("ours", "upstream")
        ),
        rf"1 pods: ours / upstream VmRSS {N}x, VmHWM {N}x",
        rf"\| 1 \| {N} \| {N} \| {N} \| {N} \| {N} \| {N} \| {N} \|",
    )


@UPSTREAM
def test_recovery_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Every restart path, ours and upstream's, one pod per Job, one-second grace periods, a
    five-second window for the runs expected to stay stuck. Two racks of two nodes is the
    smallest cluster dead-node runs on: it freezes the node of the second Job's pod, and that
    Job's next pod needs another node in the same rack. No run may end in an error."""
    out = run_bench(
        tmp_path, "recovery_bench.py",
        "--racks", "2", "--nodes", "2", "--pods", "1", "--grace", "1", "--stuck-window", "5",
        within=scaled(1200),
    )  # fmt: skip
    assert "**error**" not in out, out
    runs = (
        ("recreate", "ours"), ("recreate", "upstream"),
        ("recreate-grace", "ours"), ("recreate-grace", "upstream"),
        ("fast", "ours"),
        ("dead-node", "ours"), ("dead-node", "ours, forceDelete false"),
        ("dead-node", "upstream"),
        ("in-place", "ours"), ("in-place", "upstream"),
    )  # fmt: skip
    has(
        out,
        r"\| path \| controller \| detect t1-t0 \| .*",
        *(rf"\| {path} \| {controller} \| .*" for path, controller in runs),
        rf"- fast / ours recreate-grace, failure to all bound: {N} s / {N} s = {N}x .*",
        rf"- in-place / ours recreate, failure to all Running: {N} s / {N} s = {N}x .*",
        rf"- recreate-grace, ours / upstream, failure to all Running: {N} s / {N} s = {N}x .*",
    )


def test_restart_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """kwok only (`--skip-node`: the real node needs root and the image): 8 pods, the
    smallest count kwok's mode takes, no start cost, one round of each strategy."""
    out = run_bench(
        tmp_path, "restart_bench.py",
        "--skip-node", "--kwok-pods", "8", "--rounds", "1", "--start-costs", "0",
        within=scaled(600),
    )  # fmt: skip
    has(
        out,
        r"\| start cost S \(s\) \| pods \| InPlaceRestart \(s\) \| Recreate \(s\) \| .*",
        rf"\| 0 \| 8 \| {N} \| {N} \| {N}x \| {N}; {N} \| {N}-{N} \|",
        rf"goal: InPlaceRestart <= 0\.3x Recreate at the largest start cost \(S = 0 s\): {N}x, "
        r"(met|not met)",
    )


def test_scale_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """Both populations of one JobSet, a one-second idle window."""
    out = run_bench(tmp_path, "scale_bench.py", "--jobsets", "1", "--idle", "1", within=scaled(600))
    has(
        out,
        r"\| figure \(N = 1\) \| empty \| suspended \| running \|",
        rf"\| ready_s \| {N} \| {N} \| {N} \|",
        rf"\| rss_mib \| {N} \| {N} \| {N} \|",
        rf"\| one_change_s \|  \| {N} \| {N} \|",  # none for the empty cluster
        rf"RSS per cached Job: {N} KiB",
        rf"RSS per running JobSet with its Service and 4 Jobs: {N} KiB",
    )


@UPSTREAM
def test_queue_bench_runs_at_its_smallest_size(tmp_path: Path) -> None:
    """`scale_bench.py --queue` (queue_bench has no entry point of its own), both sides: a queue
    of one suspended JobSet of one Job, one batch; upstream creates its Job, ours defers it."""
    out = run_bench(
        tmp_path, "scale_bench.py",
        "--queue", "--jobsets", "1", "--step", "1", "--queue-replicas", "1",
        within=scaled(600),
    )  # fmt: skip
    has(
        out,
        r"\| 1 suspended JobSets of 1 Jobs \| upstream v0\.12\.0 \(creates every child\), "
        r"measured at 1 \| ours, deferredChildren on, measured at 1 \| ours / upstream \|",
        r"\| of which Jobs \| 1 \| 0 \| 0\.000x \|",
        rf"\| JobSet controller RSS, MiB \| {N} \| {N} \| {N}x \|",
        rf"\| admission to all pods of one JobSet running, s \| {N} \(at 1\) \| {N} \(at 1\) \| "
        rf"{N}x \|",
        rf"goal: JobSet controller RSS <= 0\.15x upstream's at 1: {N}x, (met|not met)",
    )
