"""Which of the built tools a pytest selection needs (hack/test.sh with arguments).

Why: a selection such as `hack/test.sh tests/unit -m "not tools"` should not wait 20 minutes for
Kubernetes, Kueue, Trainer and images it never runs. pytest collects the selection (nothing runs);
the markers of what it collected say which tools are needed, one name per line on stdout:

    k8s          the Kubernetes binaries (every cluster tier; `k8s-helm`: only helm, for the
                 unit tests marked `tools`)
    image        the controller's images and the emulator (image and node tiers), then the
                 release's files made from them
    kueue, trainer, upstream, prometheus

Usage: python hack/tools_needed.py PYTEST_ARGS...   (run by hack/test.sh, from the repository)
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

# marker -> the tools its tests run.
NEEDS: dict[str, tuple[str, ...]] = {
    "tools": ("k8s-helm", "prometheus"),
    "integration": ("k8s",),
    "e2e": ("k8s",),
    "chaos": ("k8s",),
    "kueue": ("k8s", "kueue"),
    "trainer": ("k8s", "trainer"),
    "differential": ("k8s", "upstream"),
    "upstream": ("k8s", "upstream"),
    "swap": ("k8s", "upstream"),
    "node": ("k8s", "image"),
    "image": ("image",),
}


class Markers:
    """A pytest plugin that records the markers of every collected test."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def pytest_collection_finish(self, session: Any) -> None:
        """The final selection (after `-m`, `-k` and the tiers' own deselection)."""
        for item in session.items:
            self.seen.update(mark.name for mark in item.iter_markers())


def needed(args: list[str]) -> list[str]:
    markers = Markers()
    code = pytest.main(
        [*args, "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0"],
        plugins=[markers],
    )
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise SystemExit(f"collecting {args} failed ({code})")
    tools = {tool for marker in markers.seen for tool in NEEDS.get(marker, ())}
    if "k8s" in tools:
        tools.discard("k8s-helm")
    return sorted(tools)


if __name__ == "__main__":
    # pytest's collection report goes to stderr; stdout carries only the names.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    names = needed(sys.argv[1:])
    real_stdout.write("".join(f"{name}\n" for name in names))
