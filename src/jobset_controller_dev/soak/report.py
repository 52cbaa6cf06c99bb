"""The soak's table: the controllers side by side, then every violation by name.

It reads each run's figures (`Result.figures()`, the JSON `hack/soak.py --out` writes), so runs
made by separate processes (`--at-once`) print in one table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Figures = Mapping[str, Any]


def _drains(values: list[float]) -> str:
    return ", ".join(f"{v:.0f}" for v in values) or "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _life(figures: Figures) -> str:
    """The longest steady life's growth and its name (`-` for runs before the key)."""
    if "rss_life" not in figures:
        return "-"
    return f"{_percent(figures['rss_life_growth'])} {figures['rss_life']}"


ROWS: list[tuple[str, Callable[[Figures], object]]] = [
    ("JobSets created", lambda f: f["created"]),
    ("JobSets finished", lambda f: f["finished"]),
    ("JobSets still queued by Kueue at the end", lambda f: f.get("queued_at_end", 0)),
    ("s from a burst to an empty queue", lambda f: _drains(f.get("burst_drains") or [])),
    ("invariant violations", lambda f: len(f["violations"])),
    ("last pod event -> terminal p50", lambda f: _seconds(f["latency_p50"])),
    ("last pod event -> terminal p99", lambda f: _seconds(f["latency_p99"])),
    ("last Job end -> terminal p50", lambda f: _seconds(f.get("job_latency_p50"))),
    ("last Job end -> terminal p99", lambda f: _seconds(f.get("job_latency_p99"))),
    ("API requests per JobSet", lambda f: f"{f['requests_per_jobset']:.1f}"),
    ("Job creates answered AlreadyExists", lambda f: f["already_exists"]),
    ("CPU (both replicas, every life)", lambda f: f"{f['cpu_seconds']:.0f} s"),
    ("leader RSS start / end", lambda f: f"{f['rss_start_mib']:.0f} / {f['rss_end_mib']:.0f} MiB"),
    ("leader RSS growth, second half, no burst", lambda f: _percent(f["rss_growth_second_half"])),
    ("  the same, every warm sample", lambda f: _percent(f.get("rss_growth_warm"))),
    ("  the longest steady life's own", _life),
    ("work queue depth, max", lambda f: f"{f['max_queue_depth']:.0f}"),
    ("pod failures injected", lambda f: f["injected_failures"]),
    ("faults", lambda f: len(f["faults"])),
    ("replica exits (restarted)", lambda f: len(f["replica_exits"])),
    ("load average", lambda f: f["load"]),
]


def requests_by_kind(figures: Figures, top: int = 8) -> str:
    """The most frequent kinds of request, per finished JobSet (`-` for runs before the key)."""
    kinds: Mapping[str, int] = figures.get("requests_by_kind") or {}
    per = max(1, int(figures["finished"]))
    ranked = sorted(kinds.items(), key=lambda item: (-item[1], item[0]))[:top]
    return ", ".join(f"{kind} {count / per:.2f}" for kind, count in ranked) or "-"


def table(runs: Sequence[Figures]) -> str:
    width = max(len(label) for label, _ in ROWS)
    header = " | ".join([" " * width, *(str(f["controller"]) for f in runs)])
    lines = [header, "-" * len(header)]
    lines += [
        " | ".join([label.ljust(width), *(str(cell(f)) for f in runs)]) for label, cell in ROWS
    ]
    for figures in runs:
        lines.append(
            f"\n{figures['controller']}: seed {figures['seed']}, {figures['minutes']:g} min, "
            f"started {figures['started']}"
        )
        lines += [f"  fault {fault}" for fault in figures["faults"]]
        lines += [f"  replica {line}" for line in figures["replica_exits"]]
        lines.append(f"  API requests per finished JobSet: {requests_by_kind(figures)}")
        kinds = Counter(v.split(":", 1)[0] for v in figures["violations"])
        lines.append(f"  violations by kind: {dict(kinds) or 'none'}")
        lines += [f"  {v}" for v in figures["violations"][:50]]
    return "\n".join(lines)
