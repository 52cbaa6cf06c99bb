"""Every wait of the cluster-bound tiers goes through JOBSET_TEST_TIMEOUT_SCALE: checked in code.

Why a check: one literal `timeout=30` forgotten in a helper is the wait that times out on the slow
machine the knob exists for, and nothing else would notice until that machine does. The files of
the tiers that run against real clusters (integration, e2e, node, swap, differential) and their
harness (envtest) are parsed, and a wait's bound the knob does not reach fails the test: it must
be wrapped in `polling.scaled(...)` or go to a helper that scales its bounds itself (once):

1. a `timeout=`/`within=`/`stop_within=` keyword holding a literal number, on any call but those
   helpers (subprocess, urlopen, sockets, HTTP connections, threads, ...);
2. the bound of `asyncio.wait_for(aw, N)`, `asyncio.timeout(N)`, `threading.Timer(N, f)`, and
   the one argument of `.wait(N)`, `.join(N)` and `.result(N)` (a process, thread, event or
   future);
3. a deadline `clock() + X` (`time.monotonic()`, `time.time()`, `time.perf_counter()`,
   `loop.time()`), literal or not, unless X is `scaled(...)`;
4. an elapsed time `clock() - start` compared with a bound that is not `scaled(...)`;
5. a command's `--timeout` flag (kubectl, helm, our tools) given a literal, or in an f-string a
   value not computed by `scaled(...)`;
6. `scaled(...)` handed to a helper that scales its bounds itself: the wait would be scaled twice.

Helpers are known by the name they are called through (SCALE_THEMSELVES), so a helper that scales
needs a name no unscaled call shares. The few flagged lines that are not unscaled waits are in
ALLOWED, each with its reason; an entry that no longer matches anything fails the test too, so the
list stays true.
"""

from __future__ import annotations

import ast
import itertools
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.source_trees import parse_python

ROOT = Path(__file__).resolve().parents[3]
SCANNED = (
    "src/jobset_controller_dev/envtest",
    "tests/integration",
    "tests/e2e",
    "tests/node",
    "tests/swap",
    "tests/differential",
)
BOUND_KEYWORDS = frozenset({"timeout", "within", "stop_within"})
CLOCKS = frozenset({"monotonic", "time", "perf_counter"})
ONE_ARGUMENT_WAITS = frozenset({"wait", "join", "result"})
# Helpers that multiply the bound they are given by the scale themselves (each says so in its
# docstring): a literal goes to them as it is, and `scaled(...)` must not.
SCALE_THEMSELVES = frozenset(
    {
        # envtest
        "eventually",
        "wait_healthy",
        "wait_ready",
        "stop",
        "start_local_controller",
        "local_controller",
        "wait_for",  # FullCluster's and Prometheus's (asyncio.wait_for is rule 2's)
        "wait_nodes_ready",
        "wait_jobset",
        "wait_pods",
        "wait_workload",
        "wait_rollout",
        "wait_service_served",
        # the tiers' own
        "until",
        "wait_until",
        "wait_until_gone",
        "wait_bound",
        "wait_jobs",
        "wait_terminal",
        "wait_synced",
        "exit_code",
        "outcome",
        "answer",
    }
)
# (file, text of the flagged line) -> why that literal is not a wait to scale.
ALLOWED: dict[tuple[str, str], str] = {
    ("src/jobset_controller_dev/envtest/polling.py", "loop.time() - started > limit"): (
        "`eventually` itself: `limit` is `scaled(within)`, computed once before the loop"
    ),
    ("tests/integration/test_loop_stall.py", "self._stop.wait(0.2)"): (
        "the /healthz poller's period between probes (an Event so that stop() ends it at once); "
        "scaling it would only probe less often"
    ),
    ("tests/differential/sides.py", "self.stopping.wait(0.3)"): (
        "the idleness scraper's period between scrapes (an Event so that stop() ends it at "
        "once); scaling it would only make `last` staler"
    ),
}


def _name(node: ast.expr) -> str:
    """The dotted name a call is made through (`asyncio.wait_for`, `self.proc.wait`)."""
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return f"{_name(node.func)}()"
    return "?"


def _is_call_to(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and _name(node.func).rsplit(".", 1)[-1] == name


def _has_literal(node: ast.AST) -> bool:
    """A number written in `node`, outside any `scaled(...)` (and lambdas: those are checks)."""
    if _is_call_to(node, "scaled") or isinstance(node, ast.Lambda):
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    return any(_has_literal(child) for child in ast.iter_child_nodes(node))


def _is_arithmetic(node: ast.expr) -> bool:
    """A number, or arithmetic on numbers and names (what a bound looks like)."""
    if isinstance(node, ast.Constant | ast.Name | ast.Attribute):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_arithmetic(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_arithmetic(node.left) and _is_arithmetic(node.right)
    return False


def _is_clock(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and not node.args
        and not node.keywords
    )


def _is_elapsed(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_clock(node.left)


def _scales_itself(call: ast.Call) -> bool:
    name = _name(call.func)
    return name.rsplit(".", 1)[-1] in SCALE_THEMSELVES and name != "asyncio.wait_for"


def findings(source: str) -> Iterator[tuple[int, str]]:
    """(line, rule broken) for every unscaled wait bound in `source`."""
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.Call):
            yield from _call_findings(node)
        elif isinstance(node, ast.List | ast.Tuple):
            yield from _flag_findings(node.elts)
        elif isinstance(node, ast.JoinedStr):
            yield from _formatted_flag_findings(node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if _is_clock(node.left) and not _is_call_to(node.right, "scaled"):
                yield node.lineno, "deadline not scaled"
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_elapsed(side) for side in sides) and not any(
                _is_call_to(side, "scaled") for side in sides
            ):
                yield node.lineno, "elapsed time compared with an unscaled bound"


def _call_findings(call: ast.Call) -> Iterator[tuple[int, str]]:
    name = _name(call.func)
    method = name.rsplit(".", 1)[-1]
    if _scales_itself(call):
        bounds = [k.value for k in call.keywords if k.arg in BOUND_KEYWORDS]
        bounds += [a for a in call.args if not isinstance(a, ast.Lambda)]
        if any(_is_call_to(inner, "scaled") for bound in bounds for inner in ast.walk(bound)):
            yield call.lineno, f"scaled twice: {method}() scales its bound itself"
        return
    for keyword in call.keywords:
        if keyword.arg in BOUND_KEYWORDS and _has_literal(keyword.value):
            yield keyword.value.lineno, f"literal {keyword.arg}= not scaled"
    positional = None
    if name == "asyncio.wait_for" and len(call.args) == 2:
        positional = call.args[1]
    elif (name == "asyncio.timeout" and len(call.args) == 1) or (method == "Timer" and call.args):
        positional = call.args[0]
    elif method in ONE_ARGUMENT_WAITS and len(call.args) == 1 and not call.keywords:
        positional = call.args[0] if _is_arithmetic(call.args[0]) else None
    if positional is not None and _has_literal(positional):
        yield positional.lineno, f"literal bound of {method}() not scaled"


def _flag_findings(elements: list[ast.expr]) -> Iterator[tuple[int, str]]:
    """In a command line: "--timeout=60s", or "--timeout" followed by "60"."""
    for element, following in zip(elements, [*elements[1:], None], strict=False):
        text = element.value if isinstance(element, ast.Constant) else None
        literal_next = isinstance(following, ast.Constant) and re.fullmatch(
            r"[\d.]+\w*", str(following.value)
        )
        if (isinstance(text, str) and re.match(r"--timeout=\d", text)) or (
            text == "--timeout" and literal_next
        ):
            yield element.lineno, "literal --timeout flag not scaled"


def _formatted_flag_findings(string: ast.JoinedStr) -> Iterator[tuple[int, str]]:
    """f"--timeout={x}s" where x is not computed by `scaled(...)`."""
    for part, value in itertools.pairwise(string.values):
        if (
            isinstance(part, ast.Constant)
            and str(part.value).endswith("--timeout=")
            and not any(_is_call_to(inner, "scaled") for inner in ast.walk(value))
        ):
            yield string.lineno, "--timeout flag not scaled"


def scanned_files() -> list[Path]:
    return sorted(path for folder in SCANNED for path in (ROOT / folder).rglob("*.py"))


def test_every_wait_of_the_cluster_tiers_and_envtest_is_scaled() -> None:
    unscaled: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in scanned_files():
        relative = path.relative_to(ROOT).as_posix()
        lines = path.read_text().splitlines()
        for line, rule in findings(path.read_text()):
            text = lines[line - 1].strip()
            allowed = [key for key in ALLOWED if key[0] == relative and key[1] in text]
            if allowed:
                used.update(allowed)
            else:
                unscaled.append(f"{relative}:{line}: {rule}: {text}")
    assert not unscaled, (
        "waits that JOBSET_TEST_TIMEOUT_SCALE does not reach (wrap the bound in "
        "polling.scaled(...) or pass it to a helper that scales it; rules and exceptions in "
        "tests/unit/tooling/test_waits_are_scaled.py):\n" + "\n".join(unscaled)
    )
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED entries that match no line any more: {stale}"


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("subprocess.run(argv, timeout=60)", "literal timeout= not scaled"),
        ("urlopen(url, timeout=SLOW + 5)", "literal timeout= not scaled"),
        ("await asyncio.wait_for(task, 30)", "literal bound of wait_for() not scaled"),
        ("async with asyncio.timeout(5): pass", "literal bound of timeout() not scaled"),
        ("proc.wait(30)", "literal bound of wait() not scaled"),
        ("thread.join(10)", "literal bound of join() not scaled"),
        ("threading.Timer(60, proc.kill)", "literal bound of Timer() not scaled"),
        ("run(['helm', 'install', '--wait', '--timeout=5m'])", "literal --timeout flag"),
        ("run(['tool', '--timeout', '60'])", "literal --timeout flag"),
        ("run(['kubectl', f'--timeout={int(timeout)}s'])", "--timeout flag not scaled"),
        ("deadline = time.monotonic() + 10", "deadline not scaled"),
        ("deadline = loop.time() + within", "deadline not scaled"),
        ("if time.monotonic() - started > within: pass", "elapsed time compared with an unscaled"),
        ("await eventually(check, 'x', scaled(5))", "scaled twice: eventually()"),
        ("cluster.wait_for(path, ok, timeout=scaled(5))", "scaled twice: wait_for()"),
    ],
)
def test_the_check_finds_an_unscaled_or_twice_scaled_wait(source: str, rule: str) -> None:
    [(_, found)] = findings(textwrap.dedent(source))
    assert found.startswith(rule)


@pytest.mark.parametrize(
    "source",
    [
        "subprocess.run(argv, timeout=scaled(60))",
        "urlopen(url, timeout=scaled(SLOW + 5))",
        "await asyncio.wait_for(task, scaled(30))",
        "proc.wait(timeout)",
        "', '.join(str(n) for n in range(3))",
        "deadline = time.monotonic() + scaled(within)",
        "run(['kubectl', f'--timeout={scaled(timeout):.0f}s'])",
        "run(['tool', '--timeout', f'{scaled(60):g}'])",
        "params = {'timeoutSeconds': '240'}",
        "if time.monotonic() - started > scaled(within): pass",
        "await eventually(check, 'x', 5)",
        "await eventually(lambda: took < scaled(2), 'x', 5)",
        "cluster.wait_for(path, ok, timeout=60)",
        "process.stop(60)",
        "Informer(kube, resource, read_timeout=10)",
        "time.sleep(0.2)",
    ],
)
def test_the_check_passes_a_scaled_bound_a_scaling_helper_and_what_is_no_wait(
    source: str,
) -> None:
    assert list(findings(textwrap.dedent(source))) == []
