"""Running the controller's image here, for the image tests: with podman (the project's own
configuration, hack/podman-env.sh), natively or, for another architecture, under Debian's
qemu-user-static run directly as the container's entry point (nothing registered with the
kernel's binfmt_misc).

Also what the tests read from a run: the modules Python imported (`PYTHONPROFILEIMPORTTIME`'s
report on stderr), and which of them have bytecode in the image.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jobset_controller.manager.environment import go_arch
from jobset_controller_dev.envtest.binaries import repo_root
from jobset_controller_dev.envtest.polling import scaled

VENV = PurePosixPath("/opt/jobset-controller")
PYTHON = VENV / "bin" / "python"
# The emulator for each architecture this machine may not run (hack/qemu.sh caches them).
EMULATORS = {
    "arm64": "qemu-aarch64-static",
    "s390x": "qemu-s390x-static",
    "amd64": "qemu-x86_64-static",
}
IMPORT_TIME = "import time:"


def _root() -> Path:
    root = repo_root()
    if root is None:
        raise RuntimeError("the image tests need the repository (hack/podman-env.sh)")
    return root


def podman(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`podman args...` with the project's configuration and storage, its output captured;
    fails on a non-zero exit (with podman's stderr) when `check`. `timeout` is scaled."""
    result = subprocess.run(
        ["bash", "-c", '. hack/podman-env.sh && exec podman "$@"', "podman", *args],
        cwd=_root(),
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}: {result.stderr}")
    return result


@dataclass(frozen=True)
class Image:
    """One architecture's image and how to start its programs here."""

    name: str
    arch: str
    qemu_dir: Path | None = None  # set when this machine cannot run `arch` natively

    @property
    def emulated(self) -> bool:
        return self.arch != go_arch()

    def run_argv(
        self,
        program: str,
        args: Sequence[str],
        *,
        mounts: Mapping[Path, str] = {},
        env: Mapping[str, str] = {},
        name: str | None = None,
    ) -> list[str]:
        """`podman run` of `program` (a script of the venv's bin/, e.g. `jobset-controller`,
        or `python`) with `args`, as the image's user, on this machine's network (podman's
        configuration: host network, so 127.0.0.1 is this machine's loopback). Emulated: the
        emulator is the entry point and runs the image's Python on the script."""
        argv = ["run", "--rm", "--pull=never", "--arch", self.arch]
        if name:
            argv += ["--name", name]
        for host, inside in mounts.items():
            argv += ["-v", f"{host}:{inside}:ro"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        command = [str(VENV / "bin" / program), *args]
        if self.emulated:
            if self.qemu_dir is None:
                raise AssertionError(f"{self.arch} needs an emulator: no qemu directory given")
            emulator = self.qemu_dir / EMULATORS[self.arch]
            argv += ["-v", f"{emulator}:/qemu:ro", "--entrypoint", "/qemu", self.name]
            # The emulator starts ELF files only: a script is given to the image's Python.
            interpreter = [str(PYTHON)] if program != "python" else []
            return [*argv, *interpreter, *command]
        return [*argv, "--entrypoint", command[0], self.name, *command[1:]]

    def run(
        self,
        program: str,
        *args: str,
        mounts: Mapping[Path, str] = {},
        env: Mapping[str, str] = {},
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion; the result (exit code, stdout, stderr), podman's platform warning
        removed from stderr."""
        result = podman(
            *self.run_argv(program, args, mounts=mounts, env=env), timeout=timeout, check=False
        )
        result.stderr = "\n".join(
            line
            for line in result.stderr.splitlines()
            if "does not match the expected platform" not in line
        )
        return result

    def popen(
        self,
        program: str,
        *args: str,
        name: str,
        mounts: Mapping[Path, str] = {},
        env: Mapping[str, str] = {},
        stderr: Path,
    ) -> subprocess.Popen[bytes]:
        """Start in the background (stopped by `stop(name)`), stderr to a file."""
        with stderr.open("wb") as log:
            return subprocess.Popen(
                [
                    "bash",
                    "-c",
                    '. hack/podman-env.sh && exec podman "$@"',
                    "podman",
                    *self.run_argv(program, args, mounts=mounts, env=env, name=name),
                ],
                cwd=_root(),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )


def stop(name: str, process: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """SIGTERM to the container's process (`podman kill`), wait for `podman run` to end (the
    container is removed with it); its exit code. Past `timeout` (scaled) it is killed."""
    podman("kill", "--signal", "TERM", name, check=False)
    try:
        return process.wait(timeout=scaled(timeout))
    except subprocess.TimeoutExpired:
        podman("rm", "--force", name, check=False)
        process.kill()
        return process.wait()


def imported_modules(stderr: str) -> set[str]:
    """The modules a Python run with `PYTHONPROFILEIMPORTTIME=1` imported, from its report."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith(IMPORT_TIME) and not line.rstrip().endswith("imported package"):
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@dataclass(frozen=True)
class Mounted:
    """An image's files, read-only, on this machine (`podman image mount`)."""

    root: Path

    def python_dirs(self) -> list[Path]:
        stdlib = next((self.root / "usr/lib").glob("python3.*/os.py")).parent
        site = next((self.root / VENV.relative_to("/") / "lib").glob("python3.*/site-packages"))
        return [stdlib, site]

    def source_of(self, module: str) -> Path | None:
        """The module's .py file in the image (None for built-in and extension modules)."""
        relative = Path(*module.split("."))
        for directory in self.python_dirs():
            for candidate in (
                directory / relative.with_suffix(".py"),
                directory / relative / "__init__.py",
            ):
                if candidate.is_file():
                    return candidate
        return None

    def without_bytecode(self, modules: Iterable[str]) -> list[str]:
        """Those of `modules` whose source is in the image without a .pyc beside it (the
        image's Python's cache tag, e.g. `cpython-311`, not this machine's)."""
        tag = "cpython-" + self.python_dirs()[0].name.removeprefix("python").replace(".", "")
        missing = []
        for module in sorted(modules):
            source = self.source_of(module)
            if source is None:
                continue
            if not (source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc").exists():
                missing.append(module)
        return missing

    def files(self) -> list[Path]:
        return [Path(d) / f for d, _, files in os.walk(self.root) for f in files]


def mounted(image: str) -> Mounted:
    """Mount the image's files (unmount with `unmount(image)`)."""
    return Mounted(Path(podman("image", "mount", image).stdout.strip()))


def unmount(image: str) -> None:
    podman("image", "unmount", image, check=False)
