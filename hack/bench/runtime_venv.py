"""A virtualenv with the controller's runtime dependencies only, for the benchmarks.

Why: the image installs `pyproject.toml`'s `dependencies` and nothing else, while the development
venv also holds the test tools, some of which change what the controller imports (structlog's dev
module imports `rich` when it is installed, which `import-linter` brings: ~0.1 s of every start).
A start-time figure taken in the development venv would measure a process no user runs.

The venv is cached under ~/.cache/jobset-controller, keyed by the dependency list, and built with
the interpreter running the benchmark; the controller's source tree still comes from PYTHONPATH.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "jobset-controller"


def runtime_python() -> Path:
    """The interpreter of the runtime-only venv, built on first use."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    digest = hashlib.sha256("\n".join(sorted(deps)).encode()).hexdigest()[:12]
    venv = CACHE / f"bench-runtime-venv-{digest}"
    python = venv / "bin" / "python"
    if not (venv / "ready").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *deps], check=True)
        (venv / "ready").write_text("\n".join(deps) + "\n")
    return python


def add_venv_option(parser: argparse.ArgumentParser) -> None:
    """`--dev-venv`: run ours in the development venv instead (what `ours_python` reads)."""
    parser.add_argument(
        "--dev-venv",
        action="store_true",
        help="run ours in this (development) venv instead of a runtime-only one",
    )


def ours_python(args: argparse.Namespace) -> Path | None:
    """The interpreter ours runs in: the runtime-only venv's, or None (this one) with
    `--dev-venv`."""
    return None if args.dev_venv else runtime_python()


if __name__ == "__main__":
    print(runtime_python())
